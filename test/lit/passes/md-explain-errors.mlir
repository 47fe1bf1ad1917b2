// RUN: md-opt %s -split-input-file -verify-diagnostics --md-explain=world-size=3 -o /dev/null
// RUN: not md-opt %s -split-input-file --md-explain 2>&1 | FileCheck %s --check-prefix=NOWORLD
// NOWORLD: error: md-explain needs a world size: the model has no world_size and world-size is not given
// RUN: not md-opt %s -split-input-file --md-explain="world-size=2 format=yaml" 2>&1 | FileCheck %s --check-prefix=FORMAT
// FORMAT: error: md-explain: format must be text or json, got 'yaml'

// At W = 3 the 8 samples of a step do not split into micro-batches of 2 on
// every rank.
md.model @m {
  md.forward @forward(%x: tensor<2x4xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  // expected-error @+1 {{global_batch 8 is not a multiple of micro_batch x world size = 2 x 3 = 6}}
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 2
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
  } hooks {
  }
}
