// md-mixed-precision on the step programs md-apply-plan builds for a small
// model (the input is md-apply-plan's test model with bf16 precision).
//
// RUN: sed -e 's/WORLD//' -e 's/SHARD/full/' -e 's/PREC/param = bf16, reduce = bf16/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan,md-mixed-precision))' | FileCheck %s --check-prefix=FULL
// RUN: sed -e 's/WORLD//' -e 's/SHARD/none/' -e 's/PREC/param = bf16, reduce = f32/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan,md-mixed-precision))' | FileCheck %s --check-prefix=DDP
// RUN: sed -e 's/WORLD//' -e 's/SHARD/optimizer/' -e 's/PREC/param = bf16, reduce = bf16/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan,md-mixed-precision))' | FileCheck %s --check-prefix=ZERO1
// RUN: sed -e 's/WORLD//' -e 's/SHARD/full/' -e 's/PREC/param = f32, reduce = f32/' %s | md-opt --pass-pipeline='builtin.module(md.model(md-apply-plan,md-mixed-precision))' | FileCheck %s --check-prefix=F32 --implicit-check-not=md.cast --implicit-check-not=bf16 --implicit-check-not='role params'

// fsdp-full: each unit keeps a bf16 copy of its master shard (`params`),
// refreshed once per step; the all-gather moves bf16; compute in bf16; the
// loss stays f32; gradients are accumulated in f32, reduced in bf16 and
// handed to the optimizer in bf16, which widens them exactly.
// FULL: md.state @u0.master : tensor<?xf32> shard(12) group world role master unit 0
// FULL-NEXT: md.state @u0.params : tensor<?xbf16> shard(12) group world role params unit 0
// FULL: md.micro_steps
// FULL: %[[B:.*]]:2 = md.batch : tensor<2x8xf32>, tensor<2xi32>
// FULL-NEXT: %[[X:.*]] = md.cast %[[B]]#0 : tensor<2x8xf32> to tensor<2x8xbf16>
// FULL-NOT: md.state_load @u1.master
// FULL: %[[S:.*]] = md.state_load @u1.params : tensor<?xbf16>
// FULL-NEXT: %[[G:.*]] = md.all_gather %[[S]] group world {{.*}} : tensor<?xbf16> -> tensor<36xbf16>
// FULL-NEXT: md.view %[[G]][0] : tensor<36xbf16> to tensor<4x8xbf16>
// FULL: md.matmul %[[X]], {{.*}} : tensor<2x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16> -> tensor<2x4xbf16>
// FULL: %[[L:.*]] = md.cross_entropy {{.*}} : tensor<2x3xbf16>, tensor<2xi32> -> tensor<f32>
// FULL-NEXT: md.record_loss %[[L]] : tensor<f32>
// FULL: md.grad_accumulate %{{.*}} into @u0.grad_acc : tensor<12xbf16>
// FULL: }
// FULL: %[[F:.*]] = md.flatten %{{.*}} : tensor<3x4xbf16> to tensor<12xbf16>
// FULL-NEXT: %[[T:.*]] = md.grad_total %[[F]] from @u0.grad_acc : tensor<12xbf16> -> tensor<12xf32>
// FULL-NEXT: %[[TR:.*]] = md.cast %[[T]] : tensor<12xf32> to tensor<12xbf16>
// FULL-NEXT: %[[R:.*]] = md.reduce_scatter %[[TR]] avg group world {{.*}} : tensor<12xbf16> -> tensor<?xbf16>
// FULL: md.global_norm %[[R]], %{{.*}} squared : tensor<?xbf16>, tensor<?xbf16>
// FULL: %[[C:.*]]:2 = md.clip %[[R]], %{{.*}} : tensor<?xbf16>, tensor<?xbf16>
// FULL: %[[P:.*]], %{{.*}}, %{{.*}} = md.adamw_update %{{.*}}, %[[C]]#0, {{.*}} : tensor<?xf32>, tensor<?xbf16>
// FULL-NEXT: md.state_store
// FULL-NEXT: md.state_store
// FULL-NEXT: md.state_store %[[P]], @u0.master : tensor<?xf32>
// FULL-NEXT: %[[PH:.*]] = md.cast %[[P]] : tensor<?xf32> to tensor<?xbf16>
// FULL-NEXT: md.state_store %[[PH]], @u0.params : tensor<?xbf16>

// ddp: the replicated bf16 copy is read by the views; gradients reduce in
// f32 (no cast around the all-reduce).
// DDP: md.state @u0.master : tensor<12xf32> role master unit 0
// DDP-NEXT: md.state @u0.params : tensor<12xbf16> role params unit 0
// DDP: %[[M:.*]] = md.state_load @u1.params : tensor<36xbf16>
// DDP-NEXT: md.view %[[M]][0] : tensor<36xbf16> to tensor<4x8xbf16>
// DDP: %[[T:.*]] = md.grad_total %{{.*}} from @u0.grad_acc : tensor<12xbf16> -> tensor<12xf32>
// DDP-NEXT: md.all_reduce %[[T]] avg group world {{.*}} : tensor<12xf32>
// DDP-NOT: md.cast {{.*}} to tensor<12xbf16>
// DDP: md.adamw_update {{.*}} : tensor<12xf32>, tensor<12xf32>
// DDP: md.cast %{{.*}} : tensor<12xf32> to tensor<12xbf16>

// zero1: the `params` state holds bf16 and the post-step all-gather moves
// bf16; the all-reduced gradient stays full until the step, which slices it.
// ZERO1: md.state @u0.params : tensor<12xbf16> role params unit 0
// ZERO1: md.state_load @u1.params : tensor<36xbf16>
// ZERO1: %[[AR:.*]] = md.all_reduce %{{.*}} avg group world {{.*}} : tensor<12xbf16>
// ZERO1: %[[SL:.*]] = md.shard_slice %[[AR]] group world : tensor<12xbf16> -> tensor<?xbf16>
// ZERO1: %[[P:.*]], %{{.*}}, %{{.*}} = md.adamw_update
// ZERO1: %[[PH:.*]] = md.cast %[[P]] : tensor<?xf32> to tensor<?xbf16>
// ZERO1-NEXT: %[[AG:.*]] = md.all_gather %[[PH]] group world {md.phase = "step", md.unit = 0 : i64} : tensor<?xbf16> -> tensor<12xbf16>
// ZERO1-NEXT: md.state_store %[[AG]], @u0.params : tensor<12xbf16>

// An all-f32 policy changes nothing: no cast, no bf16 and no `params` copy
// anywhere (the --implicit-check-not options of the RUN line); the master
// shard is what is gathered, reduced and updated, all in f32.
// F32: md.state @u0.master : tensor<?xf32> shard(12) group world role master unit 0
// F32: md.micro_steps
// F32: %[[B:.*]]:2 = md.batch : tensor<2x8xf32>, tensor<2xi32>
// F32: %[[S:.*]] = md.state_load @u1.master : tensor<?xf32>
// F32-NEXT: %[[G:.*]] = md.all_gather %[[S]] group world {{.*}} : tensor<?xf32> -> tensor<36xf32>
// F32-NEXT: %[[W:.*]] = md.view %[[G]][0] : tensor<36xf32> to tensor<4x8xf32>
// F32: md.matmul %[[B]]#0, %[[W]] bias {{.*}} : tensor<2x8xf32>, tensor<4x8xf32>, tensor<4xf32> -> tensor<2x4xf32>
// F32: %[[T:.*]] = md.grad_total %{{.*}} from @u0.grad_acc : tensor<12xf32> -> tensor<12xf32>
// F32-NEXT: %[[R:.*]] = md.reduce_scatter %[[T]] avg group world {{.*}} : tensor<12xf32> -> tensor<?xf32>
// F32: %[[C:.*]]:2 = md.clip %[[R]], %{{.*}} : tensor<?xf32>, tensor<?xf32>
// F32: %[[M:.*]] = md.state_load @u0.master : tensor<?xf32>
// F32: %[[P:.*]], %{{.*}}, %{{.*}} = md.adamw_update %[[M]], %[[C]]#0, {{.*}} : tensor<?xf32>, tensor<?xf32>
// F32: md.state_store %[[P]], @u0.master : tensor<?xf32>

md.model @mlp attributes {WORLD plan = #md.plan<name = "fsdp-full", preset = "fsdp-full", shard = SHARD, wrap = blocks(h), precision = {PREC, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = true, checkpoint_activations = none>} {
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
