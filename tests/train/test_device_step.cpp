// DeviceStep (parallel/device_step.h), the GPU executor's StepEngine, without
// a GPU: behind the DeviceStage interface a stand-in whose "device" is a CPU
// model and whose update is FlatOptimizer with the gradient scale DeviceStep
// hands it, as the CUDA executor's is. Driven as Trainer::train_step drives
// any engine, it must train as SingleStep does over the same model: with
// clipping hit, with an fp16-style loss scale (unscaled, then clipped), and
// after a skipped step whose gradients were left behind.
#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "host_device.h"
#include "models/cuda/cuda_model.h"
#include "models/model.h"
#include "models/model_config.h"
#include "ops/device_ops.h"
#include "optim/adamw.h"
#include "parallel/device_step.h"
#include "parallel/single_step.h"

namespace loom::test {
namespace {

// One step as Trainer::train_step runs it; `apply` false: skipped after the
// norm (fp16 overflow), leaving its gradients behind.
double drive(StepEngine& e, int step, double max_norm, double loss_scale, bool apply) {
    const CausalLmBatch a(2 * step), b(2 * step + 1);
    const std::vector<MicroBatch> micro = {a.micro(), b.micro()};
    const double total = double(micro[0].label_count + micro[1].label_count);
    e.begin_step();
    const double loss = e.run(micro, loss_scale / total) / total;
    e.finalize_grads();
    if (loss_scale != 1.0) e.scale_grads(float(1.0 / loss_scale));
    const double norm = e.clip_grad_norm(loss_scale != 1.0 ? 0.0 : max_norm);
    if (!apply) return norm;
    if (loss_scale != 1.0) e.clip_grad_norm(max_norm);  // again, as train_step does
    e.step(1e-2);
    EXPECT_TRUE(std::isfinite(loss));
    return norm;
}

TEST(DeviceStep, TrainsAsSingleStepDoes) {
    const ModelConfig c = tiny_gpt2(2);
    auto host = build_model(c), dev = build_model(c);
    host->init(5);
    dev->init(5);
    const std::vector<float> start(dev->params().params_data(),
                                   dev->params().params_data() + dev->params().flat_numel());
    AdamW adamw(host->params(), AdamWParams{});
    SingleStep single(*host, adamw);
    HostDevice stand_in(*dev);
    DeviceStep device(stand_in, nullptr, nullptr, nullptr);

    // (clip, loss scale, applied): clipping hit; an fp16 scale, unscaled then
    // clipped; a skipped step; a plain one after it.
    const struct {
        double max_norm, scale;
        bool apply;
    } steps[] = {{0.05, 1.0, true}, {0.05, 1024.0, true}, {0.05, 512.0, false}, {1e9, 1.0, true}};
    int s = 0;
    for (const auto& st : steps) {
        const double n1 = drive(single, s, st.max_norm, st.scale, st.apply);
        const double n2 = drive(device, s, st.max_norm, st.scale, st.apply);
        EXPECT_NEAR(n2, n1, 1e-9 * n1) << "step " << s << ": the norm";
        if (s == 0) {
            EXPECT_GT(n1, 0.05) << "clipping is not hit";
        }
        ++s;
    }
    EXPECT_EQ(stand_in.steps, 3);
    EXPECT_EQ(stand_in.zeroed, 1) << "only the skipped step's gradients needed zeroing";
    EXPECT_EQ(stand_in.scope, LogitsScope::labelled_positions);
    const ParamTable& a = host->params();
    const ParamTable& b = dev->params();
    double worst = 0, moved = 0;
    for (int64_t i = 0; i < a.flat_numel(); ++i) {
        const double x = a.params_data()[i], y = b.params_data()[i];
        worst = std::max(worst, std::fabs(x - y) / (1e-6 + std::fabs(x)));
        moved = std::max(moved, std::fabs(y - double(start[size_t(i)])));
    }
    EXPECT_LT(worst, 1e-5) << "DeviceStep trained another model than SingleStep";
    EXPECT_GT(moved, 1e-3) << "the parameters did not move";
}

}  // namespace
}  // namespace loom::test
