# Lane-level emulation (numpy, CPU) of paged_split_kernel in cpp/backend/cuda/paged_attention_bf16.cu:
# the kernel's index expressions transcribed (q fragments, cp.async piece layout, ldmatrix addresses,
# masking, online softmax, P = hi + lo, warp merge, split combine), ldmatrix and mma.m16n8k16 by the
# PTX fragment layouts, against a float64 reference. Sequential: it checks indexing and arithmetic,
# not synchronisation. Keep it in step with the kernel when either changes.
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
def row_split(len_, causal, window, max_blocks, shift, unit):
    qpos = len_ - 1
    j_hi = min(min(qpos + 1, len_) if causal else len_, max_blocks << shift)
    j_lo = max(0, qpos - window + 1) if window > 0 else 0
    n = j_hi - j_lo
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

def run(R=5, hq=32, hkv=8, D=128, bs=16, window=0, softcap=0.0, lens=None, max_blocks=None, unit=kChunk):
    g = hq // hkv; shift = int(math.log2(bs)); LD = D + 8; KS = D // 16; OB = D // 8; VEC = D // 8
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
        j_lo, j_hi, per, splits = row_split(lens[r], causal, window, max_blocks, shift, unit)
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
                    o = [[[0.0]*4 for _ in range(OB)] for _ in range(32)]
                    m = [-np.inf]*32; l = [0.0]*32
                    j0 = s0 + warp * kPiece
                    while j0 < s1:
                        nk = min(kPiece, s1 - j0)
                        blk_l = [table[r, (j0 + lane) >> shift] if lane < nk else 0 for lane in range(32)]
                        ks = np.full(kPiece * LD, np.nan); vs = np.full(kPiece * LD, np.nan)
                        for kvi in range(2):
                            src = K[hk].reshape(-1) if kvi == 0 else V[hk].reshape(-1)
                            dst = ks if kvi == 0 else vs
                            for it in range(VEC):
                                for lane in range(32):
                                    idx = lane + 32 * it; key = idx // VEC; c = idx % VEC
                                    blk = blk_l[key]; ok = key < nk
                                    slot = (blk << shift) + ((j0 + key) & (bs - 1))
                                    dst[key * LD + c * 8: key * LD + c * 8 + 8] = src[slot * D + c * 8: slot * D + c * 8 + 8] if ok else 0.0
                        s = [[[0.0]*4 for _ in range(4)] for _ in range(32)]
                        for kk in range(KS):
                            for np_ in range(2):
                                addrs = [(np_ * 16 + (lane >> 4) * 8 + (lane & 7)) * LD + kk * 16 + ((lane >> 3) & 1) * 8 for lane in range(32)]
                                b = ldmatrix(ks, addrs, False)
                                A = [[qa[t][kk][0], (0., 0.), qa[t][kk][1], (0., 0.)] for t in range(32)]
                                C0 = [s[t][2 * np_] for t in range(32)]; C1 = [s[t][2 * np_ + 1] for t in range(32)]
                                mma(C0, A, [b[t][0] for t in range(32)], [b[t][1] for t in range(32)])
                                mma(C1, A, [b[t][2] for t in range(32)], [b[t][3] for t in range(32)])
                        mx = [-np.inf]*32
                        for lane in range(32):
                            for nb in range(4):
                                for e in range(2):
                                    x = s[lane][nb][e]
                                    if softcap > 0: x = softcap * math.tanh(x * scale_log2 / softcap) * 1.4426950408889634
                                    else: x *= scale_log2
                                    if nb * 8 + (lane & 3) * 2 + e >= nk: x = -np.inf
                                    s[lane][nb][e] = x; mx[lane] = max(mx[lane], x)
                        mx = [max(mx[t], mx[t ^ 1]) for t in range(32)]
                        mx = [max(mx[t], mx[t ^ 2]) for t in range(32)]
                        phi = [[None]*4 for _ in range(32)]; plo = [[None]*4 for _ in range(32)]
                        for lane in range(32):
                            m_new = max(m[lane], mx[lane]); m_use = 0.0 if m_new == -np.inf else m_new
                            corr = 2.0 ** (m[lane] - m_use); m[lane] = m_new
                            psum = 0.0
                            for nb in range(4):
                                p0 = 2.0 ** (s[lane][nb][0] - m_use); p1 = 2.0 ** (s[lane][nb][1] - m_use)
                                psum += p0 + p1
                                h = bf16([p0, p1]); lo = bf16(np.array([p0, p1], dtype=np.float32) - h)
                                phi[lane][nb] = (h[0], h[1]); plo[lane][nb] = (lo[0], lo[1])
                            l[lane] = l[lane] * corr + psum
                            for i in range(OB): o[lane][i][0] *= corr; o[lane][i][1] *= corr
                        for kk in range(2):
                            for dp in range(D // 16):
                                addrs = [(kk * 16 + ((lane >> 3) & 1) * 8 + (lane & 7)) * LD + dp * 16 + (lane >> 4) * 8 for lane in range(32)]
                                b = ldmatrix(vs, addrs, True)
                                for P in (phi, plo):
                                    A = [[P[t][2 * kk], (0., 0.), P[t][2 * kk + 1], (0., 0.)] for t in range(32)]
                                    C0 = [o[t][2 * dp] for t in range(32)]; C1 = [o[t][2 * dp + 1] for t in range(32)]
                                    mma(C0, A, [b[t][0] for t in range(32)], [b[t][1] for t in range(32)])
                                    mma(C1, A, [b[t][2] for t in range(32)], [b[t][3] for t in range(32)])
                        j0 += kSW * kPiece
                    l = [l[t] + l[t ^ 1] for t in range(32)]
                    l = [l[t] + l[t ^ 2] for t in range(32)]
                    for lane in range(32):
                        hrow = lane >> 2
                        if hrow < 4:
                            for nb in range(OB):
                                mo[warp, hrow, nb * 8 + (lane & 3) * 2] = o[lane][nb][0]
                                mo[warp, hrow, nb * 8 + (lane & 3) * 2 + 1] = o[lane][nb][1]
                            if (lane & 3) == 0: mm[warp, hrow] = m[lane]; ml[warp, hrow] = l[lane]
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
    print("D=64 g=2 unit 256 window", run(R=2, hq=2, hkv=1, D=64, lens=[900, 300], window=500, unit=256))
