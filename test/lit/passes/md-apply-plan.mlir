// The step program md-apply-plan builds for each sharding of one small model
// (a block `h.0` in unit 1, a head in the root unit 0), from a hand-written
// gradient function in md-autodiff's output form. The RUN lines fill in the
// plan's options.
//
// RUN: sed -e 's/WORLD//' -e 's/SHARD/full/' -e 's/RESHARD/true/' -e 's/CKPT/none/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=COMMON,FULL
// RUN: sed -e 's/WORLD//' -e 's/SHARD/full/' -e 's/RESHARD/false/' -e 's/CKPT/none/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=COMMON,KEEP
// RUN: sed -e 's/WORLD//' -e 's/SHARD/grad_op/' -e 's/RESHARD/false/' -e 's/CKPT/none/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=COMMON,GRADOP
// RUN: sed -e 's/WORLD//' -e 's/SHARD/optimizer/' -e 's/RESHARD/false/' -e 's/CKPT/none/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=COMMON,ZERO1
// RUN: sed -e 's/WORLD//' -e 's/SHARD/none/' -e 's/RESHARD/false/' -e 's/CKPT/none/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=COMMON,DDP
// RUN: sed -e 's/WORLD/world_size = 1 : i64,/' -e 's/SHARD/none/' -e 's/RESHARD/false/' -e 's/CKPT/none/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=COMMON,SINGLE
// RUN: sed -e 's/WORLD/world_size = 1 : i64,/' -e 's/SHARD/full/' -e 's/RESHARD/true/' -e 's/CKPT/none/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=COMMON,SINGLE
// RUN: sed -e 's/WORLD/shard_group_size = 2 : i64,/' -e 's/SHARD/hybrid(shard_group = 2)/' -e 's/RESHARD/true/' -e 's/CKPT/none/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=COMMON,HYBRID
// RUN: sed -e 's/WORLD//' -e 's/SHARD/full/' -e 's/RESHARD/true/' -e 's/CKPT/blocks(h)/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan))' | FileCheck %s --check-prefixes=CKPT

// Parameters get their offsets in the unit's flat buffer.
// COMMON: md.param @h.0.w : tensor<4x8xf32> {{.*}} unit 1 offset 0
// COMMON: md.param @h.0.b : tensor<4xf32> {{.*}} unit 1 offset 32
// COMMON: md.param @head.w : tensor<3x4xf32> {{.*}} unit 0 offset 0

// FULL: md.state @u0.master : tensor<?xf32> shard(12) group world role master unit 0
// FULL: md.state @u0.exp_avg : tensor<?xf32> shard(12) group world role exp_avg unit 0
// FULL: md.state @u0.exp_avg_sq : tensor<?xf32> shard(12) group world role exp_avg_sq unit 0
// FULL: md.state @u0.grad_acc : tensor<12xf32> role grad_acc unit 0
// FULL: md.state @u1.master : tensor<?xf32> shard(36) group world role master unit 1
// DDP: md.state @u0.master : tensor<12xf32> role master unit 0
// DDP-NOT: md.state @u0.params
// DDP: md.state @u0.exp_avg : tensor<12xf32> role exp_avg unit 0
// ZERO1: md.state @u0.master : tensor<?xf32> shard(12) group world role master unit 0
// ZERO1: md.state @u0.params : tensor<12xf32> role params unit 0
// GRADOP: md.state @u0.params : tensor<12xf32> role params unit 0
// HYBRID: md.state @u0.master : tensor<?xf32> shard(12) group shard role master unit 0

// The gradient function is inlined and gone.
// COMMON-NOT: md.func @forward.grad

// The first micro-steps gather but reduce nothing.
// COMMON: md.micro_steps {
// COMMON: md.batch : tensor<2x8xf32>, tensor<2xi32>
// COMMON: md.accum_scale : tensor<f32>
// COMMON-NOT: md.reduce_scatter
// COMMON-NOT: md.all_reduce
// COMMON: md.grad_accumulate %{{.*}} into @u0.grad_acc : tensor<12xf32>
// COMMON-NOT: md.reduce_scatter
// COMMON-NOT: md.all_reduce
// COMMON: md.grad_accumulate %{{.*}} into @u1.grad_acc : tensor<36xf32>
// COMMON-NEXT: }

// fsdp-full: unit 1 is gathered before its first forward use, unit 0 before
// the head; both again before their backward.
// FULL: %[[B:.*]]:2 = md.batch
// FULL: %[[S1:.*]] = md.state_load @u1.master : tensor<?xf32>
// FULL: %[[F1:.*]] = md.all_gather %[[S1]] group world {md.phase = "forward", md.unit = 1 : i64} : tensor<?xf32> -> tensor<36xf32>
// FULL: %[[W:.*]] = md.view %[[F1]][0] : tensor<36xf32> to tensor<4x8xf32>
// FULL: %[[BI:.*]] = md.view %[[F1]][32] : tensor<36xf32> to tensor<4xf32>
// FULL: md.matmul %[[B]]#0, %[[W]] bias %[[BI]] transpose_b
// FULL: md.all_gather {{.*}} {md.phase = "forward", md.unit = 0 : i64} : tensor<?xf32> -> tensor<12xf32>
// FULL: %[[L:.*]] = md.cross_entropy
// FULL-NEXT: md.record_loss %[[L]] : tensor<f32>
// FULL: md.all_gather {{.*}} {md.phase = "backward", md.unit = 0 : i64} : tensor<?xf32> -> tensor<12xf32>
// FULL: %{{.*}}, %[[DW2:.*]] = md.matmul_grad
// FULL: %[[G0:.*]] = md.flatten %[[DW2]] {md.backward, md.unit = 0 : i64} : tensor<3x4xf32> to tensor<12xf32>
// FULL: %[[T0:.*]] = md.grad_total %[[G0]] from @u0.grad_acc : tensor<12xf32> -> tensor<12xf32>
// FULL: %[[R0:.*]] = md.reduce_scatter %[[T0]] avg group world {md.backward, md.unit = 0 : i64} : tensor<12xf32> -> tensor<?xf32>
// FULL: md.all_gather {{.*}} {md.phase = "backward", md.unit = 1 : i64} : tensor<?xf32> -> tensor<36xf32>
// FULL: %[[G1:.*]] = md.flatten %{{.*}}, %{{.*}} {md.backward, md.unit = 1 : i64} : tensor<4x8xf32>, tensor<4xf32> to tensor<36xf32>
// FULL: %[[T1:.*]] = md.grad_total %[[G1]] from @u1.grad_acc
// FULL: %[[R1:.*]] = md.reduce_scatter %[[T1]] avg group world {md.backward, md.unit = 1 : i64} : tensor<36xf32> -> tensor<?xf32>
// Clipping: local squared norm of the shards, one all-reduce, sqrt, clip.
// FULL: %[[SQ:.*]] = md.global_norm %[[R0]], %[[R1]] squared : tensor<?xf32>, tensor<?xf32> -> tensor<f32>
// FULL: %[[SUM:.*]] = md.all_reduce %[[SQ]] sum group world : tensor<f32>
// FULL: %[[N:.*]] = md.sqrt %[[SUM]] : tensor<f32>
// FULL: %[[C:.*]]:2 = md.clip %[[R0]], %[[R1]], %[[N]] max_norm 1.0
// FULL: %[[STEP0:.*]] = md.step : i64
// FULL: %[[STEP:.*]] = arith.addi %[[STEP0]], %{{.*}} : i64
// FULL: %[[LR:.*]] = md.lr %[[STEP0]] : f32
// FULL: %[[M0:.*]] = md.state_load @u0.master : tensor<?xf32>
// FULL: md.adamw_update %[[M0]], %[[C]]#0, %{{.*}}, %{{.*}}, %[[LR]], %[[STEP]] beta1 0.9 beta2 0.999 eps 1.0e-08 weight_decay 0.01 : tensor<?xf32>, tensor<?xf32>
// FULL: md.state_store %{{.*}}, @u0.master : tensor<?xf32>
// FULL-NOT: md.all_gather
// FULL: } hooks {

// Without reshard_after_forward the backward reuses the forward's gather.
// KEEP-COUNT-2: {md.phase = "forward"
// KEEP-NOT: md.phase = "backward"
// KEEP: md.reduce_scatter

// ZeRO-2: parameters are read from the gathered `params` state; gradients
// reduce-scattered; the new parameters all-gathered after the step.
// GRADOP: md.state_load @u1.params : tensor<36xf32>
// GRADOP: md.reduce_scatter %{{.*}} avg group world {md.backward, md.unit = 0 : i64}
// GRADOP: md.reduce_scatter %{{.*}} avg group world {md.backward, md.unit = 1 : i64}
// GRADOP: %[[P0:.*]], %{{.*}}, %{{.*}} = md.adamw_update
// GRADOP: md.state_store %[[P0]], @u0.master : tensor<?xf32>
// GRADOP: %[[AG:.*]] = md.all_gather %[[P0]] group world {md.phase = "step", md.unit = 0 : i64} : tensor<?xf32> -> tensor<12xf32>
// GRADOP: md.state_store %[[AG]], @u0.params : tensor<12xf32>

// ZeRO-1: gradients all-reduced in full, the optimizer on this rank's slice.
// ZERO1-NOT: md.reduce_scatter
// ZERO1: %[[AR:.*]] = md.all_reduce %{{.*}} avg group world {md.backward, md.unit = 0 : i64} : tensor<12xf32>
// ZERO1: md.shard_slice %[[AR]] group world : tensor<12xf32> -> tensor<?xf32>
// ZERO1: md.all_gather %{{.*}} group world {md.phase = "step", md.unit = 0 : i64}

// ddp keeps replicated state and all-reduces gradients; the norm adds the same
// per-rank slices as the sharded presets.
// DDP-NOT: md.all_gather
// DDP-NOT: md.reduce_scatter
// DDP: %[[A0:.*]] = md.all_reduce %{{.*}} avg group world {md.backward, md.unit = 0 : i64} : tensor<12xf32>
// DDP: %[[A1:.*]] = md.all_reduce %{{.*}} avg group world {md.backward, md.unit = 1 : i64} : tensor<36xf32>
// DDP: %[[S0:.*]] = md.shard_slice %[[A0]] group world
// DDP: %[[S1:.*]] = md.shard_slice %[[A1]] group world
// DDP: md.global_norm %[[S0]], %[[S1]] squared
// DDP: md.clip %[[A0]], %[[A1]], %{{.*}} max_norm 1.0 : tensor<12xf32>, tensor<36xf32>
// DDP-NOT: md.all_gather

// One rank (single, or any plan pinned to W = 1): no collective at all.
// SINGLE-NOT: md.all_gather
// SINGLE-NOT: md.reduce_scatter
// SINGLE-NOT: md.all_reduce
// SINGLE-NOT: md.shard_slice
// SINGLE: md.global_norm %{{.*}}, %{{.*}} squared : tensor<12xf32>, tensor<36xf32>

// Hybrid: reduce-scatter in the shard group, all-reduce across replicas.
// HYBRID: md.all_gather %{{.*}} group shard {md.phase = "forward"
// HYBRID: %[[RS:.*]] = md.reduce_scatter %{{.*}} avg group shard {md.backward, md.unit = 0 : i64}
// HYBRID-NEXT: md.all_reduce %[[RS]] avg group replicate {md.backward, md.unit = 0 : i64} : tensor<?xf32>
// HYBRID: md.all_reduce %{{.*}} sum group shard : tensor<f32>

// Activation checkpointing: unit 1's forward is recomputed from the
// backward-phase gather right before its backward; the saved input is the
// batch. The recomputed relu is dead (the head's backward, which ran
// before, used the saved one) and is removed.
// CKPT: } 
// CKPT: %[[G:.*]] = md.all_gather %{{.*}} {md.phase = "backward", md.unit = 1 : i64}
// CKPT-NEXT: %[[RW:.*]] = md.view %[[G]][0]
// CKPT-NEXT: %[[RB:.*]] = md.view %[[G]][32]
// CKPT-NEXT: %[[RH:.*]] = md.matmul %{{.*}}#0, %[[RW]] bias %[[RB]] transpose_b {md.recompute, md.unit = 1 : i64}
// CKPT-NEXT: md.relu_grad %{{.*}}, %[[RH]] {md.backward, md.unit = 1 : i64}

md.model @mlp attributes {WORLD plan = #md.plan<name = "fsdp-full", preset = "fsdp-full", shard = SHARD, wrap = blocks(h), precision = {param = f32, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = RESHARD, checkpoint_activations = CKPT>} {
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
