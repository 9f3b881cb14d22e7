// A Model whose next-token logits are looked up in a [vocab, vocab] table by the previous token
// (a bigram model). It exists to test the generation loop (sampling, stops, abort, release of
// state) quickly and exactly, without weights; `delay_ms` slows each forward to make abort
// timing testable. Not a model family: it is never picked by load_model().
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "models/model.h"

namespace mlxb {

std::shared_ptr<Model> make_table_model(std::vector<float> table, int64_t vocab, double delay_ms = 0);

}  // namespace mlxb
