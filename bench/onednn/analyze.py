import sys, collections, statistics as st
f = sys.argv[1] if len(sys.argv) > 1 else 'full.txt'
T = sys.argv[2] if len(sys.argv) > 2 else 't2'
USEMIN = len(sys.argv) > 3 and sys.argv[3] == 'min'
med = collections.defaultdict(list); mn = collections.defaultdict(list); imp = {}
order = []
for l in open(f):
    if not l.startswith('RES|') or l.count('|') < 9: continue
    _, t, lib, net, shape, pas, dtn, ms, mi, impl = l.rstrip('\n').split('|', 9)
    if t != T: continue
    k = (net, shape, pas, dtn, lib)
    med[k].append(float(ms)); mn[k].append(float(mi)); imp[k] = impl
    if (net, shape) not in order: order.append((net, shape))
def g(net, shape, pas, dtn, lib):
    k = (net, shape, pas, dtn, lib)
    return (min(mn[k]) if USEMIN else st.mean(med[k])) if k in med else None
def gm(net, shape, pas, dtn, lib):
    k = (net, shape, pas, dtn, lib)
    return min(mn[k]) if k in mn else None
cols = [('2.6','f32'),('2.6','bf16'),('3.x','f32'),('3.x','bf16')]
SH = {'fwd':'w_reorder_fwd','bwd_data':'w_reorder_bwdd','bwd_weights':'dw_reorder'}
def short(s):
    return (s.replace('avx512_core_bf16','bf16').replace('avx512_core','avx512').replace('brg_fwd:bf16+brgconv:bf16','brg_fwd+brgconv:bf16')
             .replace('brg_fwd:avx512+brgconv:avx512','brg_fwd+brgconv:avx512'))
print(f"# threads={T}; cell = median ms (mean over rounds of per-run medians) [+reorder ms] impl")
print("| net | shape | pass | " + " | ".join(f"{a} {b}" for a,b in cols) + " | 2.6 bf16-dW | 3.x bf16-dW |")
print("|---|---|---|" + "---|"*6)
tot = collections.defaultdict(float); totr = collections.defaultdict(float)
for net, shape in order:
    passes = ['fwd','bwd_data','bwd_weights'] if ('x' in shape and '->' in shape) else sorted({k[2] for k in med if k[0]==net and k[1]==shape}, key=lambda p:p)
    for p in passes:
        cells = []
        for lib, d in cols + [('2.6','bf16_dwbf16'),('3.x','bf16_dwbf16')]:
            dd = d
            if p != 'bwd_weights' and d == 'bf16_dwbf16': cells.append(''); continue
            if d in ('f32','bf16') and p in ('reorder',): dd = 'f32->bf16'
            v = g(net, shape, p, dd, lib)
            if v is None: cells.append('n/a'); continue
            r = g(net, shape, SH[p], dd, lib) if p in SH else None
            k = (net, shape, p, dd, lib)
            cells.append(f"{v:.2f}" + (f" [+{r:.2f}]" if r else "") + f" {short(imp[k])}")
            if p in SH:
                tot[(net, lib, d)] += v; totr[(net, lib, d)] += v + (r or 0)
        print(f"| {net} | {shape} | {p} | " + " | ".join(cells) + " |")
print("\n# totals per network (fwd+bwd_data+bwd_weights over listed layers): prim only / incl. weight reorders")
for net in ['cosmo','cosmo128','tiramisu','deepcam']:
    print(f"| {net} | " + " | ".join(f"{lib} {d}: {tot[(net,lib,d)]:.1f} / {totr[(net,lib,d)]:.1f}" for lib, d in cols) + " |")
