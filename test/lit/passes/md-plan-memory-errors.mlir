// RUN: md-opt %s -split-input-file -verify-diagnostics --md-plan-memory="world-size=2 max-memory=256"
// RUN: not md-opt %s -split-input-file --md-plan-memory=world-size=-1 2>&1 | FileCheck %s --check-prefix=NEGATIVE
// NEGATIVE: error: md-plan-memory: world-size and max-memory must be >= 0, got -1 and 0

// The peak (72 + 72 + 36 persistent, 36 + 72 gathered) exceeds 256 bytes;
// the notes name where it is reached and the largest buffers then.
// expected-error @+1 {{predicted peak memory of 288 bytes per rank at world size 2 exceeds max-memory 256 bytes}}
md.model @too_big {
  // expected-note @+1 {{72 bytes of params: md.state @u0.master}}
  md.state @u0.master : tensor<?xf32> shard(36) group world role master unit 0
  // expected-note @+1 {{72 bytes of optimizer: md.state @u0.exp_avg}}
  md.state @u0.exp_avg : tensor<?xf32> shard(36) group world role exp_avg unit 0
  md.state @u0.exp_avg_sq : tensor<?xf32> shard(18) group world role exp_avg_sq unit 0
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 2 micro_batch 1
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    %m = md.state_load @u0.master : tensor<?xf32>
    %c = md.cast %m : tensor<?xf32> to tensor<?xbf16>
    // expected-note @+2 {{the peak is reached at this 'md.all_gather'}}
    // expected-note @+1 {{72 bytes of params: result of 'md.all_gather'}}
    %p = md.all_gather %c group world : tensor<?xbf16> -> tensor<36xbf16>
    %v = md.view %p[0] : tensor<36xbf16> to tensor<4xbf16>
  } hooks {
  }
}

// -----

// A dynamically sized value must be the shard of a flat buffer.
md.model @unsized {
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 2 micro_batch 1
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    %x = md.batch : tensor<4xf32>
    // expected-error @+1 {{cannot size result #0 of type 'tensor<?xf32>': a dynamic size must be the shard of a flat buffer}}
    %g = md.all_gather %x group world : tensor<4xf32> -> tensor<?xf32>
  } hooks {
  }
}
