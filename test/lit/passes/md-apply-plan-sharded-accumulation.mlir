// md-apply-plan with `grad_accumulation = sharded` (md.grad_accumulation on
// md.model): every micro-step reduce-scatters its flat gradient and only the
// shard accumulates, in a grad_acc state as sharded as the master. The model
// is md-apply-plan.mlir's (a block `h.0` in unit 1, a head in unit 0).
//
// RUN: sed -e 's/WORLD//' -e 's/SHARD/full/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=COMMON,FULL
// RUN: sed -e 's/WORLD//' -e 's/SHARD/grad_op/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=COMMON,FULL
// RUN: sed -e 's/WORLD/shard_group_size = 2 : i64,/' -e 's/SHARD/hybrid(shard_group = 2)/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=COMMON,HYBRID
// On one rank the shard is the whole gradient: local accumulation.
// RUN: sed -e 's/WORLD/world_size = 1 : i64,/' -e 's/SHARD/full/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=SINGLE

// FULL: md.state @u0.grad_acc : tensor<?xf32> shard(12) group world role grad_acc unit 0
// FULL: md.state @u1.grad_acc : tensor<?xf32> shard(36) group world role grad_acc unit 1
// HYBRID: md.state @u0.grad_acc : tensor<?xf32> shard(12) group shard role grad_acc unit 0
// SINGLE: md.state @u0.grad_acc : tensor<12xf32> role grad_acc unit 0
// SINGLE-NOT: md.reduce_scatter

// The earlier micro-steps reduce-scatter each unit's gradient right after
// its last contribution and accumulate the shard; nothing crosses replicas.
// COMMON: md.micro_steps {
// COMMON: %[[G0:.*]] = md.flatten %{{.*}} {md.backward, md.unit = 0 : i64} : tensor<3x4xf32> to tensor<12xf32>
// FULL-NEXT: %[[S0:.*]] = md.reduce_scatter %[[G0]] avg group world {md.backward, md.unit = 0 : i64} : tensor<12xf32> -> tensor<?xf32>
// HYBRID-NEXT: %[[S0:.*]] = md.reduce_scatter %[[G0]] avg group shard {md.backward, md.unit = 0 : i64} : tensor<12xf32> -> tensor<?xf32>
// COMMON-NEXT: md.grad_accumulate %[[S0]] into @u0.grad_acc : tensor<?xf32>
// COMMON: %[[G1:.*]] = md.flatten %{{.*}}, %{{.*}} {md.backward, md.unit = 1 : i64}
// COMMON-NEXT: %[[S1:.*]] = md.reduce_scatter %[[G1]] avg
// COMMON-NEXT: md.grad_accumulate %[[S1]] into @u1.grad_acc : tensor<?xf32>
// COMMON-NOT: md.all_reduce
// COMMON: }

// The last micro-step adds its shard to the accumulated one; a hybrid mesh
// then averages the total across replicas.
// COMMON: %[[L0:.*]] = md.flatten %{{.*}} {md.backward, md.unit = 0 : i64} : tensor<3x4xf32> to tensor<12xf32>
// COMMON-NEXT: %[[R0:.*]] = md.reduce_scatter %[[L0]] avg
// COMMON-NEXT: %[[T0:.*]] = md.grad_total %[[R0]] from @u0.grad_acc : tensor<?xf32> -> tensor<?xf32>
// HYBRID-NEXT: md.all_reduce %[[T0]] avg group replicate {md.backward, md.unit = 0 : i64} : tensor<?xf32>
// FULL-NOT: md.all_reduce {{.*}} avg
// COMMON: md.adamw_update

md.model @mlp attributes {WORLD md.grad_accumulation = "sharded", plan = #md.plan<name = "fsdp-full", preset = "fsdp-full", shard = SHARD, wrap = blocks(h), precision = {param = f32, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = true, checkpoint_activations = none>} {
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
