# Lane-level emulation (numpy, CPU) of paged_split2_kernel in cpp/backend/cuda/paged_attention_bf16.cu
# (the default split kernel; the first one, paged_split_kernel, was emulated by this file's history):
# the kernel's index expressions transcribed (slot lookups with the last key repeated, two chunks
# ahead, the slot shuffles and cp.async layout of the four-slot ring of 16-key halves, q fragments,
# ldmatrix / ldmatrix.trans addresses, masking, online softmax per half with the voted rescale,
# P = hi + lo, O^T = V^T P^T, warp merge, split combine, balanced or unit splits), ldmatrix and mma.m16n8k16 by the PTX fragment layouts, against a float64
# reference. Sequential: it checks indexing and arithmetic, not synchronisation. Keep it in step
# with the kernel when either changes.
#   python3 scripts/cuda/paged_split_emu.py      (~10 s; prints nmse and NaN count per case)
import numpy as np, math
rng = np.random.default_rng(1)
def bf16(x):
    x = np.asarray(x, dtype=np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7fff + ((b >> 16) & 1)) >> 16) << 16
    return r.astype(np.uint32).view(np.float32)
kPiece, kSW = 32, 4
kChunk, kMaxSplits = kSW * kPiece, 32
def split_keys(n, unit): return unit * ((n + unit * kMaxSplits - 1) // (unit * kMaxSplits))
def row_split(len_, causal, window, max_blocks, shift, unit, balanced):
    qpos = len_ - 1
    j_hi = min(min(qpos + 1, len_) if causal else len_, max_blocks << shift)
    j_lo = max(0, qpos - window + 1) if window > 0 else 0
    n = j_hi - j_lo
    if balanced:
        nn = max(n, 1); ns = min(kMaxSplits, (nn + unit - 1) // unit)
        per = kChunk * ((nn + ns * kChunk - 1) // (ns * kChunk))
    else:
        per = split_keys(max(n, 1), unit)
    splits = 1 if n <= 0 else (n + per - 1) // per
    return j_lo, j_hi, per, splits

def ldmatrix(mem, addrs, trans):
    # addrs[lane] = element index of a row start (8 elements); returns regs[lane][i] = (lo, hi)
    regs = [[None]*4 for _ in range(32)]
    for i in range(4):
        M = np.array([mem[addrs[8*i + rr]: addrs[8*i + rr] + 8] for rr in range(8)])  # 8x8
        if trans: M = M.T
        for t in range(32):
            regs[t][i] = (M[t // 4, (t % 4) * 2], M[t // 4, (t % 4) * 2 + 1])
    return regs

def mma(C, A, B0, B1):
    # C[lane] = [c0..c3]; A[lane] = [a0..a3] each (lo, hi); B0/B1[lane] = (lo, hi)
    Am = np.zeros((16, 16)); Bm = np.zeros((16, 8))
    for t in range(32):
        g, c = t // 4, t % 4
        for j in range(2):
            Am[g, 2*c + j] = A[t][0][j]; Am[g + 8, 2*c + j] = A[t][1][j]
            Am[g, 2*c + 8 + j] = A[t][2][j]; Am[g + 8, 2*c + 8 + j] = A[t][3][j]
            Bm[2*c + j, g] = B0[t][j]; Bm[2*c + 8 + j, g] = B1[t][j]
    P = (Am.astype(np.float64) @ Bm.astype(np.float64))
    for t in range(32):
        g, c = t // 4, t % 4
        C[t][0] += P[g, 2*c]; C[t][1] += P[g, 2*c + 1]; C[t][2] += P[g + 8, 2*c]; C[t][3] += P[g + 8, 2*c + 1]

def run(R=5, hq=32, hkv=8, D=128, bs=16, window=0, softcap=0.0, lens=None, max_blocks=None, unit=kChunk, balanced=True):
    g = hq // hkv; shift = int(math.log2(bs)); LD = D + 8; KS = D // 16; DT = D // 16; CQ = D // 32
    if max_blocks is None: max_blocks = (max(lens) + bs - 1) // bs
    nblocks = R * max_blocks + 3
    perm = rng.permutation(nblocks)
    table = perm[:R * max_blocks].reshape(R, max_blocks)
    slots = nblocks * bs
    K = bf16(rng.uniform(-1, 1, (hkv, slots, D))); V = bf16(rng.uniform(-1, 1, (hkv, slots, D)))
    Q = bf16(rng.uniform(-1, 1, (R, hq, D)))
    scale = 1 / math.sqrt(D); causal = True
    scale_log2 = scale if softcap > 0 else scale * 1.4426950408889634
    out = np.full((R, hq, D), np.nan)
    S_grid = min(kMaxSplits, max(1, -(-(max_blocks << shift) // unit)))
    part = np.full((R, hkv, S_grid, g, D + 2), np.nan)
    for r in range(R):
        j_lo, j_hi, per, splits = row_split(lens[r], causal, window, max_blocks, shift, unit, balanced)
        for hk in range(hkv):
            for split in range(S_grid):
                if split >= splits: continue
                s0 = j_lo + split * per; s1 = min(j_hi, s0 + per)
                # per-warp state
                mm = np.full((kSW, 4), -np.inf); ml = np.zeros((kSW, 4)); mo = np.zeros((kSW, 4, D))
                for warp in range(kSW):
                    # q fragments
                    qa = [[None]*KS for _ in range(32)]
                    qflat = Q[r].reshape(-1)
                    for lane in range(32):
                        hrow = lane >> 2
                        for kk in range(KS):
                            if hrow < g:
                                base = (hk * g + hrow) * D + kk * 16 + (lane & 3) * 2
                                qa[lane][kk] = ((qflat[base], qflat[base + 1]), (qflat[base + 8], qflat[base + 9]))
                            else:
                                qa[lane][kk] = ((0., 0.), (0., 0.))
                    o = [[[0.0]*4 for _ in range(DT)] for _ in range(32)]
                    m = [-np.inf]*32; l = [0.0]*32
                    def lookup(jb):
                        out_ = []
                        for lane in range(32):
                            if jb >= s1: out_.append(0); continue
                            j = jb + min(lane, s1 - jb - 1)
                            out_.append(int(table[r, j >> shift] << shift) + (j & (bs - 1)))
                        return out_
                    CQ = D // 64
                    # ring: 4 slots of 16 keys (2h: K of half h, 2h + 1: V); NaN until copied
                    ring = [np.full(16 * LD, np.nan) for _ in range(4)]
                    def copy(src, slot_idx, slot_l, h):
                        dst = ring[slot_idx]
                        for lane in range(32):
                            for p in range(4):
                                key = 16 * h + (lane >> 3) + 4 * p          # shfl source lane
                                slot = slot_l[key]
                                for c in range(CQ):
                                    d0 = ((lane >> 3) + 4 * p) * LD + (lane & 7) * 8 + c * 64   # cp_off + p*4*kRow + c*128 bytes
                                    s0_ = slot * D + (lane & 7) * 8 + c * 64
                                    dst[d0:d0 + 8] = src[s0_:s0_ + 8]
                    Kf = K[hk].reshape(-1); Vf = V[hk].reshape(-1)
                    j0 = s0 + warp * kPiece
                    kStep = kSW * kPiece
                    slot_a = lookup(j0); slot_b = lookup(j0 + kStep)
                    for h in range(2):
                        if j0 + 16 * h < s1:
                            copy(Kf, 2 * h, slot_a, h); copy(Vf, 2 * h + 1, slot_a, h)
                    while j0 < s1:
                        jn = j0 + kStep
                        slot_c = lookup(jn + kStep)
                        for h in range(2):
                            jh = j0 + 16 * h; live = jh < s1; nxt = jn + 16 * h < s1; nk = s1 - jh
                            sa = [[[0.0]*4 for _ in range(2)] for _ in range(32)]
                            sb = [[[0.0]*4 for _ in range(2)] for _ in range(32)]
                            if live:
                                ks = ring[2 * h]
                                for kk in range(KS):
                                    addrs = [((lane >> 4) * 8 + (lane & 7)) * LD + kk * 16 + ((lane >> 3) & 1) * 8 for lane in range(32)]
                                    b = ldmatrix(ks, addrs, False)
                                    A = [[qa[t][kk][0], (0., 0.), qa[t][kk][1], (0., 0.)] for t in range(32)]
                                    acc_ = sb if (kk & 1) else sa
                                    C0 = [acc_[t][0] for t in range(32)]; C1 = [acc_[t][1] for t in range(32)]
                                    mma(C0, A, [b[t][0] for t in range(32)], [b[t][1] for t in range(32)])
                                    mma(C1, A, [b[t][2] for t in range(32)], [b[t][3] for t in range(32)])
                            if nxt: copy(Kf, 2 * h, slot_b, h)
                            if live:
                                mx = [-np.inf]*32
                                sc = [[[0.0]*2 for _ in range(2)] for _ in range(32)]
                                for lane in range(32):
                                    for nb in range(2):
                                        for e in range(2):
                                            x = sa[lane][nb][e] + sb[lane][nb][e]
                                            if softcap > 0: x = softcap * math.tanh(x * scale_log2 / softcap) * 1.4426950408889634
                                            else: x *= scale_log2
                                            if nb * 8 + (lane & 3) * 2 + e >= nk: x = -np.inf
                                            sc[lane][nb][e] = x; mx[lane] = max(mx[lane], x)
                                mx = [max(mx[t], mx[t ^ 1]) for t in range(32)]
                                mx = [max(mx[t], mx[t ^ 2]) for t in range(32)]
                                m_new = [max(m[t], mx[t]) for t in range(32)]
                                if any(m_new[t] != m[t] for t in range(32)):  # __any_sync
                                    corr = [2.0 ** (m[t] - (0.0 if m_new[t] == -np.inf else m_new[t])) for t in range(32)]
                                    for lane in range(32):
                                        t4 = lane & 3
                                        c0 = corr[t4 * 8]; c1 = corr[t4 * 8 + 4]
                                        l[lane] *= corr[lane]
                                        for i in range(DT):
                                            o[lane][i][0] *= c0; o[lane][i][1] *= c1; o[lane][i][2] *= c0; o[lane][i][3] *= c1
                                    m = m_new
                                phi = [[None]*2 for _ in range(32)]; plo = [[None]*2 for _ in range(32)]
                                for lane in range(32):
                                    m_use = 0.0 if m[lane] == -np.inf else m[lane]
                                    psum = 0.0
                                    for nb in range(2):
                                        p0 = 2.0 ** (sc[lane][nb][0] - m_use); p1 = 2.0 ** (sc[lane][nb][1] - m_use)
                                        psum += p0 + p1
                                        hh = bf16([p0, p1]); lo = bf16(np.array([p0, p1], dtype=np.float32) - hh)
                                        phi[lane][nb] = (hh[0], hh[1]); plo[lane][nb] = (lo[0], lo[1])
                                    l[lane] += psum
                                vs = ring[2 * h + 1]
                                for dp in range(DT):
                                    addrs = [(((lane >> 4) & 1) * 8 + (lane & 7)) * LD + dp * 16 + ((lane >> 3) & 1) * 8 for lane in range(32)]
                                    av = ldmatrix(vs, addrs, True)
                                    for P in (phi, plo):
                                        C = [o[t][dp] for t in range(32)]
                                        mma(C, av, [P[t][0] for t in range(32)], [P[t][1] for t in range(32)])
                            if nxt: copy(Vf, 2 * h + 1, slot_b, h)
                        slot_b = slot_c
                        j0 += kStep
                    l = [l[t] + l[t ^ 1] for t in range(32)]
                    l = [l[t] + l[t ^ 2] for t in range(32)]
                    for lane in range(32):
                        gq, t4 = lane >> 2, lane & 3
                        if t4 < 2:
                            for e in range(2):
                                h = t4 * 2 + e
                                for dp in range(DT):
                                    mo[warp, h, dp * 16 + gq] = o[lane][dp][e]
                                    mo[warp, h, dp * 16 + gq + 8] = o[lane][dp][2 + e]
                        if t4 == 0 and gq < 4: mm[warp, gq] = m[lane]; ml[warp, gq] = l[lane]
                for idx in range(g * D):
                    h, d = idx // D, idx % D
                    mx = max(mm[w, h] for w in range(kSW)); sm = 0.0; acc = 0.0
                    if mx != -np.inf:
                        for w in range(kSW):
                            f = 2.0 ** (mm[w, h] - mx); sm += ml[w, h] * f; acc += mo[w, h, d] * f
                    if splits == 1: out[r, hk * g + h, d] = (acc / sm if sm > 0 else 0.0)
                    else:
                        part[r, hk, split, h, 0] = mx if True else 0; part[r, hk, split, h, 1] = sm; part[r, hk, split, h, 2 + d] = acc
            if splits > 1:
                for hk in range(hkv):
                    for idx in range(g * D):
                        h, d = idx // D, idx % D
                        mx = max(part[r, hk, s_, h, 0] for s_ in range(splits)); sm = 0.0; acc = 0.0
                        for s_ in range(splits):
                            f = 2.0 ** (part[r, hk, s_, h, 0] - mx); sm += part[r, hk, s_, h, 1] * f; acc += part[r, hk, s_, h, 2 + d] * f
                        out[r, hk * g + h, d] = acc / sm if sm > 0 else 0.0
    # reference
    ref = np.zeros_like(out)
    for r in range(R):
        L = lens[r]; qpos = L - 1
        js = [j for j in range(L) if (window <= 0 or qpos - j < window)]
        sl = np.array([table[r, j // bs] * bs + j % bs for j in js])
        for h in range(hq):
            hk = h // g
            sc = (K[hk, sl].astype(np.float64) @ Q[r, h].astype(np.float64)) * scale
            if softcap > 0: sc = softcap * np.tanh(sc / softcap)
            p = np.exp(sc - sc.max()); p /= p.sum()
            ref[r, h] = p @ V[hk, sl].astype(np.float64)
    err = np.sum((out - ref) ** 2) / np.sum(ref ** 2)
    return err, np.isnan(out).sum()
if __name__ == "__main__":
    print("D=64 g=4 short rows", run(R=3, hq=8, hkv=2, D=64, lens=[1, 40, 130]))
    print("D=128 g=4 multi-split", run(R=3, hq=4, hkv=1, D=128, lens=[129, 600, 257]))
    print("D=128 g=4 long (256-key splits)", run(R=2, hq=4, hkv=1, D=128, lens=[4097, 5000]))
    print("D=64 g=1 window+softcap", run(R=3, hq=2, hkv=2, D=64, lens=[700, 33, 300], window=300, softcap=50.0))
    print("D=128 g=2 window", run(R=2, hq=2, hkv=1, D=128, lens=[1000, 250], window=129))
    print("D=64 g=4 wider table", run(R=2, hq=4, hkv=1, D=64, lens=[16, 400], max_blocks=60))
    print("D=128 g=4 unit 512", run(R=3, hq=4, hkv=1, D=128, lens=[700, 1500, 90], unit=512))
    print("D=128 g=4 unit 512 unbalanced", run(R=2, hq=4, hkv=1, D=128, lens=[700, 600], unit=512, balanced=False))
    print("D=64 g=2 unit 256 window", run(R=2, hq=2, hkv=1, D=64, lens=[900, 300], window=500, unit=256))
    print("D=128 g=4 unit 384 bs 64", run(R=2, hq=4, hkv=1, D=128, bs=64, lens=[575, 641], unit=384))
    print("D=64 g=4 unit 1024 (several chunks per warp)", run(R=1, hq=4, hkv=1, D=64, lens=[1000], unit=1024, balanced=False))
    print("D=128 g=4 unit 640 odd lengths", run(R=3, hq=4, hkv=1, D=128, lens=[513, 600, 17], unit=640))
