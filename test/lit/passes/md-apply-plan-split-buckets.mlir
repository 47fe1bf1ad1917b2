// md-apply-plan splits the gradient of a unit larger than bucket_cap into
// ranges when the plan all-reduces gradients (ddp, zero1), as DDP's buckets
// split a module: each range a contiguous run of parameters (never one
// parameter cut), flattened, accumulated and all-reduced right after its own
// last gradient, then joined into the unit's gradient for the optimizer. The
// model is md-apply-plan.mlir's: unit 1 holds h.0.w (32 elements, 128 bytes)
// and h.0.b (4 elements), unit 0 the head (12 elements, 48 bytes).
//
// RUN: sed -e 's/SHARD/none/' -e 's/CAP/128/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=SPLIT,DDP
// RUN: sed -e 's/SHARD/optimizer/' -e 's/CAP/128/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=SPLIT,ZERO1
// A cap that holds the unit keeps it whole; reduce-scatters never split.
// RUN: sed -e 's/SHARD/none/' -e 's/CAP/144/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=WHOLE
// RUN: sed -e 's/SHARD/full/' -e 's/CAP/128/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=WHOLE

// One accumulator per range, in offset order; unit 0 fits and keeps one.
// SPLIT: md.state @u0.grad_acc : tensor<12xf32> role grad_acc unit 0
// SPLIT: md.state @u1.grad_acc.0 : tensor<32xf32> role grad_acc unit 1
// SPLIT-NEXT: md.state @u1.grad_acc.1 : tensor<4xf32> role grad_acc unit 1
// WHOLE: md.state @u1.grad_acc : tensor<36xf32>
// WHOLE-NOT: grad_acc.0

// SPLIT: md.micro_steps {
// SPLIT: md.grad_accumulate %{{.*}} into @u0.grad_acc : tensor<12xf32>
// Both ranges of unit 1 follow the matmul_grad that makes their gradients.
// SPLIT: %[[DX:.*]], %[[DW:.*]], %[[DB:.*]] = md.matmul_grad
// SPLIT-NEXT: %[[FB:.*]] = md.flatten %[[DB]] {md.backward, md.unit = 1 : i64} : tensor<4xf32> to tensor<4xf32>
// SPLIT-NEXT: md.grad_accumulate %[[FB]] into @u1.grad_acc.1 : tensor<4xf32>
// SPLIT-NEXT: %[[FW:.*]] = md.flatten %[[DW]] {md.backward, md.unit = 1 : i64} : tensor<4x8xf32> to tensor<32xf32>
// SPLIT-NEXT: md.grad_accumulate %[[FW]] into @u1.grad_acc.0 : tensor<32xf32>
// SPLIT-NEXT: }

// The last micro-step all-reduces each range, then joins them.
// SPLIT: %[[T0:.*]] = md.grad_total %{{.*}} from @u0.grad_acc
// SPLIT-NEXT: %[[R0:.*]] = md.all_reduce %[[T0]] avg group world {md.backward, md.unit = 0 : i64} : tensor<12xf32>
// SPLIT: md.matmul_grad
// SPLIT-NEXT: %[[LB:.*]] = md.flatten %{{.*}} {md.backward, md.unit = 1 : i64} : tensor<4xf32> to tensor<4xf32>
// SPLIT-NEXT: %[[TB:.*]] = md.grad_total %[[LB]] from @u1.grad_acc.1 : tensor<4xf32> -> tensor<4xf32>
// SPLIT-NEXT: %[[RB:.*]] = md.all_reduce %[[TB]] avg group world {md.backward, md.unit = 1 : i64} : tensor<4xf32>
// SPLIT-NEXT: %[[LW:.*]] = md.flatten %{{.*}} {md.backward, md.unit = 1 : i64} : tensor<4x8xf32> to tensor<32xf32>
// SPLIT-NEXT: %[[TW:.*]] = md.grad_total %[[LW]] from @u1.grad_acc.0 : tensor<32xf32> -> tensor<32xf32>
// SPLIT-NEXT: %[[RW:.*]] = md.all_reduce %[[TW]] avg group world {md.backward, md.unit = 1 : i64} : tensor<32xf32>
// SPLIT-NEXT: %[[G1:.*]] = md.flatten %[[RW]], %[[RB]] {md.unit = 1 : i64} : tensor<32xf32>, tensor<4xf32> to tensor<36xf32>
// DDP: md.shard_slice %[[G1]]
// ZERO1: md.shard_slice %[[G1]]
// SPLIT: md.adamw_update

md.model @mlp attributes {plan = #md.plan<name = "fsdp-full", preset = "fsdp-full", shard = SHARD, wrap = blocks(h), precision = {param = f32, reduce = f32, buffer = f32, master = f32}, bucket_cap = CAP, prefetch = {forward = true, backward = pre}, reshard_after_forward = false, checkpoint_activations = none>} {
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
