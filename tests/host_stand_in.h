// HostStandIn: a CudaModel whose "device" is a CPU model's host memory, for
// testing what drives a GPU executor (the pipeline driver, the GPU step)
// without a GPU. This base holds what every stand-in answers the same way:
// no host <-> device copies, no stream, the table's flat gradient buffer.
#pragma once

#include <map>
#include <string>

#include "models/cuda/cuda_model.h"
#include "models/model.h"

namespace loom::test {

class HostStandIn : public CudaModel {
  public:
    void upload_params() override {}
    void download_params() override {}
    void download_grads() override {}
    std::map<std::string, Tensor> outputs() override { return {}; }
    void set_grad_ready_hook(GradReadyHook) override {}
    void* grads_device() override { return m_.params().grads_data(); }
    DType grad_dtype() const override { return DType::f32; }
    int64_t flat_numel() const override { return m_.params().flat_numel(); }
    void* compute_stream() override { return nullptr; }
    void synchronize() override {}
    int64_t allocated_bytes() const override { return 0; }
    int64_t peak_device_bytes() override { return 0; }
    std::string device_name() const override { return "host stand-in"; }

  protected:
    explicit HostStandIn(Model& m) : m_(m) {}
    Model& m_;
};

}  // namespace loom::test
