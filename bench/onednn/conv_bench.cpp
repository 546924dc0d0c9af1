// oneDNN 2.x / 3.x microbenchmark: conv fwd/bwd_data/bwd_weights (+weight reorders),
// pooling, batchnorm, relu, reorder; f32 vs bf16. Build against either version.
// Usage: conv_bench [filter-substring ...]   (env BENCH_REPS, default 20)
#include <oneapi/dnnl/dnnl.hpp>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <unordered_map>
#include <string>
#include <vector>

using namespace dnnl;
using tag = memory::format_tag;
using dt = memory::data_type;
using dims = memory::dims;

static engine eng(engine::kind::cpu, 0);
static stream strm(eng);
static int g_reps = 20;
static std::vector<std::string> g_filters;
static const char *g_lib = DNNL_VERSION_MAJOR >= 3 ? "3.x" : "2.6";

static bool selected(const std::string &name) {
    if (g_filters.empty()) return true;
    for (auto &f : g_filters)
        if (name.find(f) != std::string::npos) return true;
    return false;
}

static void fill(memory &m) {
    auto md = m.get_desc();
    size_t bytes = md.get_size();
    void *p = m.map_data<void>();
#if DNNL_VERSION_MAJOR >= 3
    dt mdt = md.get_data_type();
#else
    dt mdt = md.data_type();
#endif
    if (mdt == dt::f32) {
        float *f = (float *)p;
        for (size_t i = 0; i < bytes / 4; i++) f[i] = 0.01f * (float)((int)(i % 17) - 8);
    } else if (mdt == dt::bf16) {
        uint16_t *b = (uint16_t *)p;
        for (size_t i = 0; i < bytes / 2; i++) {
            float v = 0.01f * (float)((int)(i % 17) - 8);
            uint32_t u;
            std::memcpy(&u, &v, 4);
            b[i] = (uint16_t)(u >> 16);
        }
    } else {
        std::memset(p, 0, bytes);
    }
    m.unmap_data(p);
}
static memory mk(const memory::desc &md) {
    memory m(md, eng);
    fill(m);
    return m;
}

// time fn: warmup, then reps individually; return median ms
static double g_last_min = 0;
static double time_ms(const std::function<void()> &fn, int reps, int warm = 2) {
    for (int i = 0; i < warm; i++) { fn(); strm.wait(); }
    std::vector<double> t;
    for (int i = 0; i < reps; i++) {
        auto a = std::chrono::steady_clock::now();
        fn();
        strm.wait();
        auto b = std::chrono::steady_clock::now();
        t.push_back(std::chrono::duration<double, std::milli>(b - a).count());
    }
    std::sort(t.begin(), t.end());
    g_last_min = t[0];
    return t[t.size() / 2];
}

static void report(const std::string &net, const std::string &shape, const char *pass,
                   const char *dtn, double ms, const std::string &impl) {
    std::printf("RES|%s|%s|%s|%s|%s|%.3f|%.3f|%s\n", g_lib, net.c_str(), shape.c_str(), pass, dtn, ms,
                ms == 0.0 ? 0.0 : g_last_min, impl.c_str());
    std::fflush(stdout);
}

template <typename PD> static std::string impl(const PD &pd) { return pd.impl_info_str(); }

// ---------------------------------------------------------------- convolution
struct ConvShape {
    std::string net;
    int N, IC, OC, S, nd, k, pad, groups;  // S: spatial extent (cube/square), nd = 2 or 3
    int reps;
};

// mode: 0 = f32; 1 = bf16 act, f32 bias, f32 diff_w; 2 = bf16 act, bf16 diff_w (f32 diff_bias)
static void bench_conv(const ConvShape &c, int mode) {
    const char *dtn = mode == 0 ? "f32" : mode == 1 ? "bf16" : "bf16_dwbf16";
    char sb[128];
    std::snprintf(sb, sizeof sb, "%dx%d->%d@%d^%d%s%s", c.N, c.IC, c.OC, c.S, c.nd,
                  c.k == 1 ? "_1x1" : (c.k == 5 ? "_5x5" : "_3x3"), c.groups > 1 ? "_dw" : "");
    std::string shape = sb;
    if (!selected(c.net + ":" + shape)) return;
    dt adt = mode == 0 ? dt::f32 : dt::bf16;
    dt wdt = mode == 0 ? dt::f32 : dt::bf16;
    dt dwdt = mode == 2 ? dt::bf16 : dt::f32;
    bool three = c.nd == 3;
    dims sp = three ? dims{c.S, c.S, c.S} : dims{c.S, c.S};
    dims ks = three ? dims{c.k, c.k, c.k} : dims{c.k, c.k};
    dims src_d{c.N, c.IC}, dst_d{c.N, c.OC};
    for (auto s : sp) { src_d.push_back(s); dst_d.push_back(s); }
    dims w_d;
    if (c.groups > 1) w_d = {c.groups, c.OC / c.groups, c.IC / c.groups};
    else w_d = {c.OC, c.IC};
    for (auto k : ks) w_d.push_back(k);
    tag act_tag = three ? tag::ndhwc : tag::nhwc;
    tag uw_tag = c.groups > 1 ? (three ? tag::goidhw : tag::goihw) : (three ? tag::oidhw : tag::oihw);
    dims strides = three ? dims{1, 1, 1} : dims{1, 1};
    dims pads = three ? dims{c.pad, c.pad, c.pad} : dims{c.pad, c.pad};

    memory::desc src_md(src_d, adt, act_tag), dst_md(dst_d, adt, act_tag);
    memory::desc w_any(w_d, wdt, tag::any), dw_any(w_d, dwdt, tag::any);
    memory::desc b_md({c.OC}, dt::f32, tag::x);
    memory::desc user_w_md(w_d, dt::f32, uw_tag);
    try {
#if DNNL_VERSION_MAJOR >= 3
        convolution_forward::primitive_desc fpd(eng, prop_kind::forward_training,
                algorithm::convolution_direct, src_md, w_any, b_md, dst_md, strides, pads, pads);
        convolution_backward_data::primitive_desc bdpd(eng, algorithm::convolution_direct,
                src_md, w_any, dst_md, strides, pads, pads, fpd);
#else
        convolution_forward::primitive_desc fpd(
                convolution_forward::desc(prop_kind::forward_training, algorithm::convolution_direct,
                        src_md, w_any, b_md, dst_md, strides, pads, pads),
                eng);
        convolution_backward_data::primitive_desc bdpd(
                convolution_backward_data::desc(algorithm::convolution_direct, src_md, w_any,
                        dst_md, strides, pads, pads),
                eng, fpd);
#endif
        std::unique_ptr<convolution_backward_weights::primitive_desc> bwpd;
        const char *dbnote = "";
        for (int attempt = 0; attempt < 2 && !bwpd; attempt++) {
            memory::desc db_md({c.OC}, attempt == 0 ? dt::f32 : dwdt, tag::x);
            try {
#if DNNL_VERSION_MAJOR >= 3
                bwpd.reset(new convolution_backward_weights::primitive_desc(eng,
                        algorithm::convolution_direct, src_md, dw_any, db_md, dst_md, strides, pads,
                        pads, fpd));
#else
                bwpd.reset(new convolution_backward_weights::primitive_desc(
                        convolution_backward_weights::desc(algorithm::convolution_direct, src_md,
                                dw_any, db_md, dst_md, strides, pads, pads),
                        eng, fpd));
#endif
                if (attempt == 1) dbnote = " [diff_bias=bf16]";
            } catch (dnnl::error &) {}
        }

        memory src = mk(src_md), dst = mk(dst_md), diff_dst = mk(dst_md), diff_src = mk(src_md);
        memory bias = mk(b_md), user_w = mk(user_w_md);
        memory wf = mk(fpd.weights_desc()), wbd = mk(bdpd.weights_desc());
        reorder::primitive_desc rpd_wf(user_w, wf), rpd_wbd(user_w, wbd);
        reorder r_wf(rpd_wf), r_wbd(rpd_wbd);
        convolution_forward fwd(fpd);
        convolution_backward_data bwd_d(bdpd);

        int reps = c.reps;
        int warm = reps < 10 ? 1 : 2;
        if (mode != 2) {
            double t = time_ms([&] { r_wf.execute(strm, user_w, wf); }, reps, warm);
            report(c.net, shape, "w_reorder_fwd", dtn, t, rpd_wf.impl_info_str());
            t = time_ms([&] {
                fwd.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wf}, {DNNL_ARG_BIAS, bias},
                                          {DNNL_ARG_DST, dst}});
            }, reps, warm);
            report(c.net, shape, "fwd", dtn, t, impl(fpd));
            bool same = bdpd.weights_desc() == fpd.weights_desc();
            t = same ? 0.0 : time_ms([&] { r_wbd.execute(strm, user_w, wbd); }, reps, warm);
            report(c.net, shape, "w_reorder_bwdd", dtn, t, same ? std::string("same-as-fwd(reuse)") : rpd_wbd.impl_info_str());
            t = time_ms([&] {
                bwd_d.execute(strm, {{DNNL_ARG_DIFF_DST, diff_dst}, {DNNL_ARG_WEIGHTS, wbd},
                                            {DNNL_ARG_DIFF_SRC, diff_src}});
            }, reps, warm);
            report(c.net, shape, "bwd_data", dtn, t, impl(bdpd));
        }
        if (bwpd) {
            memory dw = mk(bwpd->diff_weights_desc()), db = mk(bwpd->diff_bias_desc());
            memory user_dw = mk(user_w_md);
            convolution_backward_weights bwd_w(*bwpd);
            reorder::primitive_desc rpd_dw(dw, user_dw);
            reorder r_dw(rpd_dw);
            double t = time_ms([&] {
                bwd_w.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, diff_dst},
                                            {DNNL_ARG_DIFF_WEIGHTS, dw}, {DNNL_ARG_DIFF_BIAS, db}});
            }, reps, warm);
            report(c.net, shape, "bwd_weights", dtn, t, impl(*bwpd) + dbnote);
            bool same = bwpd->diff_weights_desc() == user_w_md;
            t = same ? 0.0 : time_ms([&] { r_dw.execute(strm, dw, user_dw); }, reps, warm);
            report(c.net, shape, "dw_reorder", dtn, t, same ? std::string("none") : rpd_dw.impl_info_str());
        } else {
            report(c.net, shape, "bwd_weights", dtn, -1, "no implementation in this oneDNN");
        }
    } catch (dnnl::error &e) {
        std::printf("ERR|%s|%s|%s|%s|%s\n", g_lib, c.net.c_str(), shape.c_str(), dtn, e.what());
    }
}

// ---------------------------------------------------------------- pooling (max 2x2x2)
static void bench_pool(int N, int C, int S, dt adt) {
    char sb[64];
    std::snprintf(sb, sizeof sb, "pool_max2_%dx%d@%d^3", N, C, S);
    if (!selected(std::string("cosmo:") + sb)) return;
    const char *dtn = adt == dt::f32 ? "f32" : "bf16";
    memory::desc src_md({N, C, S, S, S}, adt, tag::ndhwc), dst_md({N, C, S / 2, S / 2, S / 2}, adt, tag::ndhwc);
    dims st{2, 2, 2}, k{2, 2, 2}, p{0, 0, 0};
    try {
#if DNNL_VERSION_MAJOR >= 3
        pooling_forward::primitive_desc fpd(eng, prop_kind::forward_training, algorithm::pooling_max,
                src_md, dst_md, st, k, dims{0, 0, 0}, p, p);
        pooling_backward::primitive_desc bpd(eng, algorithm::pooling_max, src_md, dst_md, st, k,
                dims{0, 0, 0}, p, p, fpd);
#else
        pooling_forward::primitive_desc fpd(pooling_forward::desc(prop_kind::forward_training,
                algorithm::pooling_max, src_md, dst_md, st, k, p, p), eng);
        pooling_backward::primitive_desc bpd(pooling_backward::desc(algorithm::pooling_max, src_md,
                dst_md, st, k, p, p), eng, fpd);
#endif
        memory src = mk(src_md), dst = mk(dst_md), ws = mk(fpd.workspace_desc());
        memory ddst = mk(dst_md), dsrc = mk(src_md);
        pooling_forward f(fpd);
        pooling_backward b(bpd);
        double t = time_ms([&] { f.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}, {DNNL_ARG_WORKSPACE, ws}}); }, g_reps);
        report("cosmo", sb, "pool_fwd", dtn, t, impl(fpd));
        t = time_ms([&] { b.execute(strm, {{DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_SRC, dsrc}, {DNNL_ARG_WORKSPACE, ws}}); }, g_reps);
        report("cosmo", sb, "pool_bwd", dtn, t, impl(bpd));
    } catch (dnnl::error &e) {
        std::printf("ERR|%s|pool|%s|%s|%s\n", g_lib, sb, dtn, e.what());
    }
}

// ---------------------------------------------------------------- batchnorm
static void bench_bn(dt adt) {
    const char *sb = "bn_2x64x32x32_nhwc";
    if (!selected(std::string("misc:") + sb)) return;
    const char *dtn = adt == dt::f32 ? "f32" : "bf16";
    memory::desc md({2, 64, 32, 32}, adt, tag::nhwc);
    auto flags = normalization_flags::use_scale | normalization_flags::use_shift;
    try {
#if DNNL_VERSION_MAJOR >= 3
        batch_normalization_forward::primitive_desc fpd(eng, prop_kind::forward_training, md, md, 1e-5f, flags);
        batch_normalization_backward::primitive_desc bpd(eng, prop_kind::backward, md, md, md, 1e-5f, flags, fpd);
#else
        batch_normalization_forward::primitive_desc fpd(batch_normalization_forward::desc(
                prop_kind::forward_training, md, 1e-5f, flags), eng);
        batch_normalization_backward::primitive_desc bpd(batch_normalization_backward::desc(
                prop_kind::backward, md, md, 1e-5f, flags), eng, fpd);
#endif
        memory src = mk(md), dst = mk(md), mean = mk(fpd.mean_desc()), var = mk(fpd.variance_desc());
        memory::desc cmd({64}, dt::f32, tag::x);
        memory sc = mk(cmd), sh = mk(cmd), dsc = mk(cmd), dsh = mk(cmd);
        memory ddst = mk(md), dsrc = mk(md);
        batch_normalization_forward f(fpd);
        batch_normalization_backward b(bpd);
        double t = time_ms([&] { f.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}, {DNNL_ARG_MEAN, mean},
                {DNNL_ARG_VARIANCE, var}, {DNNL_ARG_SCALE, sc}, {DNNL_ARG_SHIFT, sh}}); }, g_reps);
        report("misc", sb, "bn_fwd", dtn, t, impl(fpd));
        std::unordered_map<int, memory> bargs {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_MEAN, mean},
                {DNNL_ARG_VARIANCE, var}, {DNNL_ARG_SCALE, sc}, {DNNL_ARG_DIFF_SRC, dsrc},
                {DNNL_ARG_DIFF_SCALE, dsc}, {DNNL_ARG_DIFF_SHIFT, dsh}};
#if DNNL_VERSION_MAJOR < 3
        bargs.insert({DNNL_ARG_SHIFT, sh});  // 2.6 bnorm bwd with use_shift refuses to run without SHIFT; 3.x refuses it
#endif
        t = time_ms([&] { b.execute(strm, bargs); }, g_reps);
        report("misc", sb, "bn_bwd", dtn, t, impl(bpd));
    } catch (dnnl::error &e) {
        std::printf("ERR|%s|bn|%s|%s\n", g_lib, dtn, e.what());
    }
}

// ---------------------------------------------------------------- relu + reorder
static void bench_relu(dt adt) {
    const char *sb = "relu_4x32x32^3_ndhwc";
    if (!selected(std::string("misc:") + sb)) return;
    const char *dtn = adt == dt::f32 ? "f32" : "bf16";
    memory::desc md({4, 32, 32, 32, 32}, adt, tag::ndhwc);
    try {
#if DNNL_VERSION_MAJOR >= 3
        eltwise_forward::primitive_desc fpd(eng, prop_kind::forward_training, algorithm::eltwise_relu, md, md, 0.f, 0.f);
        eltwise_backward::primitive_desc bpd(eng, algorithm::eltwise_relu, md, md, md, 0.f, 0.f, fpd);
#else
        eltwise_forward::primitive_desc fpd(eltwise_forward::desc(prop_kind::forward_training,
                algorithm::eltwise_relu, md, 0.f, 0.f), eng);
        eltwise_backward::primitive_desc bpd(eltwise_backward::desc(algorithm::eltwise_relu, md, md, 0.f, 0.f), eng, fpd);
#endif
        memory src = mk(md), dst = mk(md), ddst = mk(md), dsrc = mk(md);
        eltwise_forward f(fpd);
        eltwise_backward b(bpd);
        double t = time_ms([&] { f.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}}); }, g_reps);
        report("misc", sb, "relu_fwd", dtn, t, impl(fpd));
        t = time_ms([&] { b.execute(strm, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, ddst}, {DNNL_ARG_DIFF_SRC, dsrc}}); }, g_reps);
        report("misc", sb, "relu_bwd", dtn, t, impl(bpd));
    } catch (dnnl::error &e) {
        std::printf("ERR|%s|relu|%s|%s\n", g_lib, dtn, e.what());
    }
}

static void bench_reorder() {
    const char *sb = "reorder_f32->bf16_4x32x32^3_ndhwc";
    if (!selected(std::string("misc:") + sb)) return;
    memory::desc a({4, 32, 32, 32, 32}, dt::f32, tag::ndhwc), b({4, 32, 32, 32, 32}, dt::bf16, tag::ndhwc);
    memory ma = mk(a), mb = mk(b);
    reorder::primitive_desc rpd(ma, mb);
    reorder r(rpd);
    double t = time_ms([&] { r.execute(strm, ma, mb); }, g_reps);
    report("misc", sb, "reorder", "f32->bf16", t, rpd.impl_info_str());
}

static const char *isa_name(cpu_isa i) {
    switch (i) {
        case cpu_isa::avx2: return "avx2";
        case cpu_isa::avx512_core: return "avx512_core";
        case cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
        case cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
#if DNNL_VERSION_MAJOR >= 3
        case cpu_isa::avx512_core_fp16: return "avx512_core_fp16";
#endif
        case cpu_isa::avx512_core_amx: return "avx512_core_amx";
        default: return "other";
    }
}

int main(int argc, char **argv) {
    if (const char *r = std::getenv("BENCH_REPS")) g_reps = std::atoi(r);
    for (int i = 1; i < argc; i++) g_filters.push_back(argv[i]);
    const version_t *v = version();
    cpu_isa isa = get_effective_cpu_isa();
    bool bf16_native = ((unsigned)isa & (unsigned)cpu_isa::avx512_core_bf16)
            == (unsigned)cpu_isa::avx512_core_bf16;
    std::printf("INFO|%s|dnnl_version=%d.%d.%d hash=%s cpu_runtime=%u threading=%s "
                "effective_isa=%s(0x%x) native_bf16_isa=%d\n",
            g_lib, v->major, v->minor, v->patch, v->hash, v->cpu_runtime,
#if DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_OMP
            "OMP",
#elif DNNL_CPU_THREADING_RUNTIME == DNNL_RUNTIME_TBB
            "TBB",
#else
            "other",
#endif
            isa_name(isa), (unsigned)isa, (int)bf16_native);
    std::fflush(stdout);

    std::vector<ConvShape> convs;
    int R = g_reps;
    // CosmoFlow batch 4, 32^3
    convs.push_back({"cosmo", 4, 4, 32, 32, 3, 3, 1, 1, R});
    convs.push_back({"cosmo", 4, 32, 64, 16, 3, 3, 1, 1, R});
    convs.push_back({"cosmo", 4, 64, 128, 8, 3, 3, 1, 1, R});
    convs.push_back({"cosmo", 4, 128, 256, 4, 3, 3, 1, 1, R});
    convs.push_back({"cosmo", 4, 256, 256, 2, 3, 3, 1, 1, R});
    // Tiramisu batch 2, 5x5 -> 32
    for (int S : {64, 32, 16})
        for (int ic : {48, 112, 176, 240, 304}) convs.push_back({"tiramisu", 2, ic, 32, S, 2, 5, 2, 1, R});
    // DeepCAM batch 2
    convs.push_back({"deepcam", 2, 728, 728, 8, 2, 3, 1, 728, R});
    convs.push_back({"deepcam", 2, 728, 728, 8, 2, 1, 0, 1, R});
    convs.push_back({"deepcam", 2, 64, 128, 32, 2, 3, 1, 1, R});
    // CosmoFlow batch 4, 128^3 (slow; few reps)
    int RB = std::getenv("BENCH_REPS_BIG") ? std::atoi(std::getenv("BENCH_REPS_BIG")) : 3;
    convs.push_back({"cosmo128", 4, 4, 32, 128, 3, 3, 1, 1, RB});
    convs.push_back({"cosmo128", 4, 32, 64, 64, 3, 3, 1, 1, RB});

    for (auto &c : convs)
        for (int mode : {0, 1, 2}) bench_conv(c, mode);
    for (dt d : {dt::f32, dt::bf16}) {
        bench_pool(4, 32, 32, d);
        bench_pool(4, 64, 16, d);
        bench_bn(d);
        bench_relu(d);
    }
    bench_reorder();
    return 0;
}
