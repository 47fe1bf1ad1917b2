// md-verify-collectives at the end of md's pipeline (final-program): the
// step programs md-apply-plan writes for each sharding pass the check, and
// their collective sequence (kind, group, bytes one rank sends at each group
// size, in the order every rank runs them) is printed. The input is
// md-apply-plan.mlir's; the RUN lines fill in the plan.
//
// RUN: sed -e 's/WORLD//' -e 's/SHARD/full/' -e 's/RESHARD/true/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan,md-verify-collectives{final-program=true print-sequence=true}))' -o /dev/null | FileCheck %s --check-prefix=FULL
// RUN: sed -e 's/WORLD//' -e 's/SHARD/none/' -e 's/RESHARD/false/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan,md-verify-collectives{final-program=true print-sequence=true}))' -o /dev/null | FileCheck %s --check-prefix=DDP
// RUN: sed -e 's/WORLD//' -e 's/SHARD/optimizer/' -e 's/RESHARD/false/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan,md-verify-collectives{final-program=true print-sequence=true}))' -o /dev/null | FileCheck %s --check-prefix=ZERO1
// RUN: sed -e 's/WORLD/shard_group_size = 2 : i64,/' -e 's/SHARD/hybrid(shard_group = 2)/' -e 's/RESHARD/true/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan,md-verify-collectives{final-program=true print-sequence=true}))' -o /dev/null | FileCheck %s --check-prefix=HYBRID
// RUN: sed -e 's/WORLD/world_size = 1 : i64,/' -e 's/SHARD/none/' -e 's/RESHARD/false/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan,md-verify-collectives{final-program=true print-sequence=true}))' -o /dev/null | FileCheck %s --check-prefix=SINGLE
//
// The whole pipeline ends with the check and accepts its own output.
// RUN: sed -e 's/WORLD//' -e 's/SHARD/full/' -e 's/RESHARD/true/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan,md-mixed-precision,canonicalize,md-bucketing,md-schedule,md-verify-collectives{final-program=true},md-plan-memory))' | FileCheck %s --check-prefix=PIPELINE
// PIPELINE: md.train @forward
// PIPELINE: md.reduce_scatter

// fsdp-full: the first micro-steps (A - 1 of them) gather, the last one
// gathers and reduce-scatters; clipping all-reduces the squared norm. A unit
// of 36 f32 sends (n - 1) x ceil(36 / n) x 4 bytes in its all-gather.
// FULL:      // @mlp, collective sequence of the step program: 11 collectives
// FULL-NEXT:   #0 all_gather group world [step/micro-steps] bytes sent 72, 96, 108, 140 at n = 2, 3, 4, 8
// FULL-NEXT:   #1 all_gather group world [step/micro-steps] bytes sent 24, 32, 36, 56 at n = 2, 3, 4, 8
// FULL-NEXT:   #2 all_gather group world [step/micro-steps] bytes sent 24, 32, 36, 56 at n = 2, 3, 4, 8
// FULL-NEXT:   #3 all_gather group world [step/micro-steps] bytes sent 72, 96, 108, 140 at n = 2, 3, 4, 8
// FULL-NEXT:   #4 all_gather group world [step] bytes sent 72, 96, 108, 140 at n = 2, 3, 4, 8
// FULL-NEXT:   #5 all_gather group world [step] bytes sent 24, 32, 36, 56 at n = 2, 3, 4, 8
// FULL-NEXT:   #6 all_gather group world [step] bytes sent 24, 32, 36, 56 at n = 2, 3, 4, 8
// FULL-NEXT:   #7 reduce_scatter avg group world [step] bytes sent 24, 32, 36, 56 at n = 2, 3, 4, 8
// FULL-NEXT:   #8 all_gather group world [step] bytes sent 72, 96, 108, 140 at n = 2, 3, 4, 8
// FULL-NEXT:   #9 reduce_scatter avg group world [step] bytes sent 72, 96, 108, 140 at n = 2, 3, 4, 8
// FULL-NEXT:   #10 all_reduce sum group world [step] bytes sent 4, 5, 6, 7 at n = 2, 3, 4, 8
// FULL-NOT:    #11

// ddp: one gradient all-reduce per unit (2(n - 1)/n of the buffer), then
// the norm.
// DDP:      // @mlp, collective sequence of the step program: 3 collectives
// DDP-NEXT:   #0 all_reduce avg group world [step] bytes sent 48, 64, 72, 84 at n = 2, 3, 4, 8
// DDP-NEXT:   #1 all_reduce avg group world [step] bytes sent 144, 192, 216, 252 at n = 2, 3, 4, 8
// DDP-NEXT:   #2 all_reduce sum group world [step] bytes sent 4, 5, 6, 7 at n = 2, 3, 4, 8

// zero1: as ddp, then the updated parameters are gathered after the step.
// ZERO1:      // @mlp, collective sequence of the step program: 5 collectives
// ZERO1:        #3 all_gather group world [step] bytes sent 24, 32, 36, 56 at n = 2, 3, 4, 8
// ZERO1-NEXT:   #4 all_gather group world [step] bytes sent 72, 96, 108, 140 at n = 2, 3, 4, 8

// hybrid: the shard group has the pinned size 2; the replicate all-reduce
// of a shard has a size its type does not tell.
// HYBRID:      // @mlp, collective sequence of the step program: 13 collectives
// HYBRID-NEXT:   #0 all_gather group shard [step/micro-steps] bytes sent 72 at n = 2
// HYBRID:        #7 reduce_scatter avg group shard [step] bytes sent 24 at n = 2
// HYBRID-NEXT:   #8 all_reduce avg group replicate [step] bytes sent ?, ?, ?, ? at n = 2, 3, 4, 8
// HYBRID:        #12 all_reduce sum group shard [step] bytes sent 4 at n = 2

// single: one rank, no collective.
// SINGLE: // @mlp, collective sequence of the step program: 0 collectives

md.model @mlp attributes {WORLD plan = #md.plan<name = "fsdp-full", preset = "fsdp-full", shard = SHARD, wrap = blocks(h), precision = {param = f32, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = RESHARD, checkpoint_activations = none>} {
  md.param @h.0.w : tensor<4x8xf32> init <normal(0.0, 0.02)> unit 1
  md.param @h.0.b : tensor<4xf32> init <zeros> unit 1
  md.param @head.w : tensor<3x4xf32> init <normal(0.0, 0.02)> unit 0
  md.forward @forward(%x: tensor<2x8xf32>, %y: tensor<2xi32>) -> tensor<f32> {
    %w = md.param_ref @h.0.w : tensor<4x8xf32>
    %b = md.param_ref @h.0.b : tensor<4xf32>
    %h = md.matmul %x, %w bias %b transpose_b : tensor<2x8xf32>, tensor<4x8xf32>, tensor<4xf32> -> tensor<2x4xf32>
    %r = md.relu %h : tensor<2x4xf32>
    %w2 = md.param_ref @head.w : tensor<3x4xf32>
    %l = md.matmul %r, %w2 transpose_b : tensor<2x4xf32>, tensor<3x4xf32> -> tensor<2x3xf32>
    %loss = md.cross_entropy %l, %y : tensor<2x3xf32>, tensor<2xi32> -> tensor<f32>
    md.return %loss : tensor<f32>
  }
  md.func @forward.grad(%x: tensor<2x8xf32>, %y: tensor<2xi32>, %dloss: tensor<f32>) -> (tensor<f32>, tensor<4x8xf32> {md.grad_of = @h.0.w}, tensor<4xf32> {md.grad_of = @h.0.b}, tensor<3x4xf32> {md.grad_of = @head.w}) {
    %w = md.param_ref @h.0.w : tensor<4x8xf32>
    %b = md.param_ref @h.0.b : tensor<4xf32>
    %h = md.matmul %x, %w bias %b transpose_b {md.unit = 1 : i64} : tensor<2x8xf32>, tensor<4x8xf32>, tensor<4xf32> -> tensor<2x4xf32>
    %r = md.relu %h {md.unit = 1 : i64} : tensor<2x4xf32>
    %w2 = md.param_ref @head.w : tensor<3x4xf32>
    %l = md.matmul %r, %w2 transpose_b {md.unit = 0 : i64} : tensor<2x4xf32>, tensor<3x4xf32> -> tensor<2x3xf32>
    %loss = md.cross_entropy %l, %y {md.unit = 0 : i64} : tensor<2x3xf32>, tensor<2xi32> -> tensor<f32>
    %dl = md.cross_entropy_grad %dloss, %l, %y {md.backward, md.unit = 0 : i64} : tensor<f32>, tensor<2x3xf32>, tensor<2xi32>
    %dr, %dw2 = md.matmul_grad %dl, %r, %w2 transpose_b {md.backward, md.unit = 0 : i64} : tensor<2x3xf32>, tensor<2x4xf32>, tensor<3x4xf32> -> tensor<2x4xf32>, tensor<3x4xf32>
    %dh = md.relu_grad %dr, %h {md.backward, md.unit = 1 : i64} : tensor<2x4xf32>
    %dx, %dw, %db = md.matmul_grad %dh, %x, %w transpose_b has_bias {md.backward, md.unit = 1 : i64} : tensor<2x4xf32>, tensor<2x8xf32>, tensor<4x8xf32> -> tensor<2x8xf32>, tensor<4x8xf32>, tensor<4xf32>
    md.return %loss, %dw, %db, %dw2 : tensor<f32>, tensor<4x8xf32>, tensor<4xf32>, tensor<3x4xf32>
  }
  md.train @forward data <synthetic, ""> global_batch 8 micro_batch 2 optimizer #md.adamw<lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.01> schedule <constant, warmup = 0, steps = 10, min_lr = 0.0> seed 1 clip_grad_norm 1.0 step {
  } hooks {
  }
}
