#include "cli/train_prediction.h"

#include <cstdio>

namespace napkin::cli {

EstimateInputs estimate_inputs(const TrainOptions& o, const Communicator& comm, double peak) {
    EstimateInputs ei;
    ei.model = o.model;
    ei.seq_len = o.plan.seq_len;
    ei.micro_batch = o.plan.micro_batch;
    ei.grad_accum = o.grad_accum;
    ei.tokens = static_cast<double>(o.steps) *
                static_cast<double>(o.plan.micro_batch * o.plan.seq_len * o.grad_accum);
    ei.precision = o.plan.precision;
    ei.optimizer = o.plan.optimizer;
    ei.checkpointing = o.plan.checkpointing;
    ei.attention = o.plan.attention;
    ei.gpus = comm.world_size();
    ei.zero = o.zero;
    ei.offload = o.offload_optimizer ? Offload::optimizer : Offload::none;
    ei.peak_flops_per_s = peak;
    ei.gpu_memory_bytes = 1e15;
    ei.engine = o.device == DeviceKind::cuda ? EstimateInputs::Engine::cuda
                                             : EstimateInputs::Engine::cpu;  // whose scratch
    return ei;
}

std::string out_of_memory_hint(const TrainOptions& o, const Communicator& comm) {
    const Estimate e = Estimator{}.run(estimate_inputs(o, comm, 1.0));
    char buf[320];
    std::snprintf(
        buf, sizeof buf,
        "; the estimator predicts a peak of %.2f GB per %s for this run (napkin estimate breaks it "
        "down): lower --micro-batch, add --checkpointing full%s",
        e.gpu.total() / 1e9, o.device == DeviceKind::cuda ? "GPU" : "process",
        o.device == DeviceKind::cuda ? ", or shard the model states over more GPUs (--zero)" : "");
    return buf;
}

}  // namespace napkin::cli
