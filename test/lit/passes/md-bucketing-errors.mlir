// The options of md-bucketing are checked before anything is bucketed.

// RUN: not md-opt %s --md-bucketing=interconnect=pigeon 2>&1 | FileCheck %s --check-prefix=LINK
// LINK: error: md-bucketing: unknown interconnect 'pigeon'; expected one of nvlink, pcie, infiniband, ethernet, shm
// RUN: not md-opt %s --md-bucketing=beta-gbps=0 2>&1 | FileCheck %s --check-prefix=BETA
// BETA: error: md-bucketing: beta-gbps must be > 0, got 0{{$}}
// RUN: not md-opt %s --md-bucketing=compute-tflops=-2.5 2>&1 | FileCheck %s --check-prefix=TFLOPS
// TFLOPS: error: md-bucketing: compute-tflops must be > 0, got -2.5{{$}}
// RUN: not md-opt %s --md-bucketing=bucket-cap=-1 2>&1 | FileCheck %s --check-prefix=CAP
// CAP: error: md-bucketing: bucket-cap must be >= 0 bytes, got -1

md.model @m {
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 2 micro_batch 2
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    %x = md.batch : tensor<4xf32>
    %g = md.flatten %x : tensor<4xf32> to tensor<4xf32>
    %r = md.all_reduce %g avg group world : tensor<4xf32>
  } hooks {
  }
}
