// RUN: md-opt %s -split-input-file -verify-diagnostics --md-schedule
// RUN: not md-opt %s -split-input-file --md-schedule=forward-prefetch=maybe 2>&1 | FileCheck %s --check-prefix=FORWARD
// FORWARD: error: md-schedule: forward-prefetch must be plan, on or off, got 'maybe'
// RUN: not md-opt %s -split-input-file --md-schedule=backward-prefetch=late 2>&1 | FileCheck %s --check-prefix=BACKWARD
// BACKWARD: error: md-schedule: backward-prefetch must be plan, pre, post or none, got 'late'
// RUN: not md-opt %s -split-input-file --md-schedule=max-inflight-gathers=-1 2>&1 | FileCheck %s --check-prefix=INFLIGHT
// INFLIGHT: error: md-schedule: max-inflight-gathers must be >= 1, got -1

// The collectives of a bucket are issued at once: one cannot use another's
// result.
md.model @bucket_uses_itself {
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 2 micro_batch 2
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    %x = md.batch : tensor<4xf32>
    // expected-note @+1 {{the other one}}
    %a = md.all_reduce %x avg group world bucket 0 : tensor<4xf32>
    // expected-error @+1 {{md-schedule: the collectives of bucket 0 cannot be issued together: this one uses another's result}}
    %b = md.all_reduce %a avg group world bucket 0 : tensor<4xf32>
  } hooks {
  }
}

// -----

// Two buckets that each need the other first: bucket 0's second member uses
// bucket 1's first, and bucket 1's second uses bucket 0's first.
md.model @buckets_cycle {
  md.forward @forward(%x: tensor<4xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 2 micro_batch 2
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    %x = md.batch : tensor<4xf32>
    // expected-error @+1 {{md-schedule: the collectives of bucket 0 cannot be issued together: the ops between them make them depend on each other or on another bucket}}
    %a1 = md.all_reduce %x avg group world bucket 0 : tensor<4xf32>
    %b1 = md.all_reduce %x sum group world bucket 1 : tensor<4xf32>
    %u = md.scale %b1 by 2.0 : tensor<4xf32>
    // expected-note @+1 {{member of the bucket}}
    %a2 = md.all_reduce %u avg group world bucket 0 : tensor<4xf32>
    %b2 = md.all_reduce %a1 sum group world bucket 1 : tensor<4xf32>
  } hooks {
  }
}
