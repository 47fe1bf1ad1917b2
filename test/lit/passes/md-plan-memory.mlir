// RUN: md-opt %s -split-input-file --md-plan-memory=world-size=2 | FileCheck %s --check-prefix=W2
// RUN: md-opt %s -split-input-file --md-plan-memory=world-size=4 | FileCheck %s --check-prefix=W4
// RUN: md-opt %s -split-input-file --md-explain="world-size=2 list-buffers" -o /dev/null | FileCheck %s --check-prefix=BUFFERS
// Without a world size (option or md.model's world_size) nothing is sized.
// RUN: md-opt %s -split-input-file --md-plan-memory | FileCheck %s --check-prefix=SYMBOLIC
// SYMBOLIC-LABEL: md.model @tiny
// SYMBOLIC-NOT: md.memory
// SYMBOLIC-LABEL: md.model @ddp
// SYMBOLIC-SAME: md.memory = {{.*}}world_size = 2 : i64

// docs/memory.md's worked example: one FSDP unit of 36 parameters (a 4x8
// weight and a bias), bf16 compute, f32 master, AdamW, two micro-steps.

// At W = 2 a shard holds ceil(36 / 2) = 18 elements and A = 2. Persistent:
// master, exp_avg and exp_avg_sq shards (72 bytes each) and the full f32
// grad_acc (144). The peak is at the last backward op, first reached in the
// micro-steps' body (position 15): the bf16 input (32), the gathered
// parameters (72), dh (16), dx (32) and the gradient pieces (64 + 8) live
// with the states. The optimizer update is in place.
// W2-LABEL: md.model @tiny
// W2-SAME: md.memory = {activations = 80 : i64, comm_buffers = 0 : i64, grad_acc = 144 : i64, grads = 72 : i64, optimizer = 144 : i64, params = 144 : i64, peak = 584 : i64, world_size = 2 : i64}

// At W = 4 a shard holds 9 elements (36 bytes) and A = 1: there is no
// accumulator and the micro-steps' body does not run.
// W4-LABEL: md.model @tiny
// W4-SAME: md.memory = {activations = 80 : i64, comm_buffers = 0 : i64, grad_acc = 0 : i64, grads = 72 : i64, optimizer = 72 : i64, params = 108 : i64, peak = 332 : i64, world_size = 4 : i64}

// BUFFERS:      buffers (positions of 46, peak at 15):
// BUFFERS-NEXT:   * persistent          72  params       md.state @u0.master
// BUFFERS-NEXT:   * persistent          72  optimizer    md.state @u0.exp_avg
// BUFFERS-NEXT:   * persistent          72  optimizer    md.state @u0.exp_avg_sq
// BUFFERS-NEXT:   * persistent         144  grad_acc     md.state @u0.grad_acc
// BUFFERS-NEXT:     1-2                 64  activations  md.batch
// BUFFERS-NEXT:   * 2-15                32  activations  md.cast
// BUFFERS:          37-42               72  grads        md.reduce_scatter
// BUFFERS-NOT:      md.adamw_update
md.model @tiny {
  md.param @w : tensor<4x8xf32> init #md.init<normal(0.0, 0.02)> unit 0 offset 0
  md.param @b : tensor<4xf32> init #md.init<zeros> unit 0 offset 32
  md.state @u0.master : tensor<?xf32> shard(36) group world role master unit 0
  md.state @u0.exp_avg : tensor<?xf32> shard(36) group world role exp_avg unit 0
  md.state @u0.exp_avg_sq : tensor<?xf32> shard(36) group world role exp_avg_sq unit 0
  md.state @u0.grad_acc : tensor<36xf32> role grad_acc unit 0
  md.forward @forward(%x: tensor<2x8xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0, 1] : tensor<2x8xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 2
      optimizer #md.adamw<lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.0>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    md.micro_steps {
      %x = md.batch : tensor<2x8xf32>
      %xb = md.cast %x : tensor<2x8xf32> to tensor<2x8xbf16>
      %m = md.state_load @u0.master : tensor<?xf32>
      %mb = md.cast %m : tensor<?xf32> to tensor<?xbf16>
      %p = md.all_gather %mb group world {md.phase = "forward", md.unit = 0 : i64} : tensor<?xbf16> -> tensor<36xbf16>
      %w = md.view %p[0] : tensor<36xbf16> to tensor<4x8xbf16>
      %b = md.view %p[32] : tensor<36xbf16> to tensor<4xbf16>
      %h = md.matmul %xb, %w bias %b transpose_b : tensor<2x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16> -> tensor<2x4xbf16>
      %hf = md.cast %h : tensor<2x4xbf16> to tensor<2x4xf32>
      %l = md.sum %hf dims [0, 1] : tensor<2x4xf32> to tensor<f32>
      md.record_loss %l : tensor<f32>
      %s = md.accum_scale : tensor<f32>
      %dh = md.sum_grad %s dims [0, 1] {md.backward} : tensor<f32> to tensor<2x4xf32>
      %dhb = md.cast %dh : tensor<2x4xf32> to tensor<2x4xbf16>
      %dx, %dw, %db = md.matmul_grad %dhb, %xb, %w transpose_b has_bias {md.backward} : tensor<2x4xbf16>, tensor<2x8xbf16>, tensor<4x8xbf16> -> tensor<2x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16>
      %g = md.flatten %dw, %db : tensor<4x8xbf16>, tensor<4xbf16> to tensor<36xbf16>
      md.grad_accumulate %g into @u0.grad_acc : tensor<36xbf16>
    }
    %x = md.batch : tensor<2x8xf32>
    %xb = md.cast %x : tensor<2x8xf32> to tensor<2x8xbf16>
    %m = md.state_load @u0.master : tensor<?xf32>
    %mb = md.cast %m : tensor<?xf32> to tensor<?xbf16>
    %p = md.all_gather %mb group world {md.phase = "forward", md.unit = 0 : i64} : tensor<?xbf16> -> tensor<36xbf16>
    %w = md.view %p[0] : tensor<36xbf16> to tensor<4x8xbf16>
    %b = md.view %p[32] : tensor<36xbf16> to tensor<4xbf16>
    %h = md.matmul %xb, %w bias %b transpose_b : tensor<2x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16> -> tensor<2x4xbf16>
    %hf = md.cast %h : tensor<2x4xbf16> to tensor<2x4xf32>
    %l = md.sum %hf dims [0, 1] : tensor<2x4xf32> to tensor<f32>
    md.record_loss %l : tensor<f32>
    %s = md.accum_scale : tensor<f32>
    %dh = md.sum_grad %s dims [0, 1] {md.backward} : tensor<f32> to tensor<2x4xf32>
    %dhb = md.cast %dh : tensor<2x4xf32> to tensor<2x4xbf16>
    %dx, %dw, %db = md.matmul_grad %dhb, %xb, %w transpose_b has_bias {md.backward} : tensor<2x4xbf16>, tensor<2x8xbf16>, tensor<4x8xbf16> -> tensor<2x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16>
    %g = md.flatten %dw, %db : tensor<4x8xbf16>, tensor<4xbf16> to tensor<36xbf16>
    %t = md.grad_total %g from @u0.grad_acc : tensor<36xbf16> -> tensor<36xf32>
    %r = md.reduce_scatter %t avg group world {md.unit = 0 : i64} : tensor<36xf32> -> tensor<?xf32>
    %step = md.step : i64
    %lr = md.lr %step : f32
    %e = md.state_load @u0.exp_avg : tensor<?xf32>
    %v = md.state_load @u0.exp_avg_sq : tensor<?xf32>
    %m2, %e2, %v2 = md.adamw_update %m, %r, %e, %v, %lr, %step beta1 0.9 beta2 0.999 eps 1.0e-08 weight_decay 0.0 : tensor<?xf32>, tensor<?xf32>
    md.state_store %m2, @u0.master : tensor<?xf32>
    md.state_store %e2, @u0.exp_avg : tensor<?xf32>
    md.state_store %v2, @u0.exp_avg_sq : tensor<?xf32>
  } hooks {
  }
}

// -----

// DDP after md-bucketing and md-schedule, pinned to W = 2. The master is a
// full state; its load and views alias it (no bytes of their own), and so
// do the results of the in-place optimizer update. The bucket's flat buffer
// is a comm_buffer; the all-reduce's result holds the reduced gradients and
// the views of it alias it. The all-reduce on the comm stream reads the
// bucket until the view waits for it (position 11), past the scale issued
// in between, where the peak is.

// W2-LABEL: md.model @ddp
// W2-SAME: md.memory = {activations = 32 : i64, comm_buffers = 80 : i64, grad_acc = 0 : i64, grads = 80 : i64, optimizer = 80 : i64, params = 80 : i64, peak = 352 : i64, world_size = 2 : i64}
// W4-LABEL: md.model @ddp
// W4-SAME: world_size = 4 : i64

// BUFFERS:      buffers (positions of 19, peak at 10):
// BUFFERS-NEXT:   * persistent          80  params       md.state @u0.master
// BUFFERS-NEXT:   * persistent          80  optimizer    md.state @u0.momentum
// BUFFERS-NEXT:   * 0-10                16  activations  md.batch
// BUFFERS-NEXT:     3-5                 16  activations  md.matmul
// BUFFERS-NEXT:     4-4                 16  activations  md.matmul_grad
// BUFFERS-NEXT:     4-6                 64  grads        md.matmul_grad
// BUFFERS-NEXT:     5-7                 16  grads        md.sum
// BUFFERS-NEXT:     6-8                 64  grads        md.flatten
// BUFFERS-NEXT:     7-8                 16  grads        md.flatten
// BUFFERS-NEXT:   * 8-11                80  comm_buffers md.flatten
// BUFFERS-NEXT:   * 9-16                80  grads        md.all_reduce
// BUFFERS-NEXT:   * 10-10               16  activations  md.scale
// BUFFERS-NEXT:     12-12                4  activations  md.global_norm
// BUFFERS-NOT:      md.sgd_update
md.model @ddp attributes {world_size = 2 : i64} {
  md.state @u0.master : tensor<20xf32> role master unit 0
  md.state @u0.momentum : tensor<20xf32> role momentum unit 0
  md.forward @forward(%x: tensor<1x4xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0, 1] : tensor<1x4xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 4 micro_batch 1
      optimizer #md.sgd<lr = 0.1, momentum = 0.9, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    %x = md.batch {md.stream = 0 : i64} : tensor<1x4xf32>
    %m = md.state_load @u0.master {md.stream = 0 : i64} : tensor<20xf32>
    %w = md.view %m[0] {md.stream = 0 : i64} : tensor<20xf32> to tensor<4x4xf32>
    %h = md.matmul %x, %w {md.stream = 0 : i64} : tensor<1x4xf32>, tensor<4x4xf32> -> tensor<1x4xf32>
    %dx, %gw = md.matmul_grad %h, %x, %w {md.stream = 0 : i64} : tensor<1x4xf32>, tensor<1x4xf32>, tensor<4x4xf32> -> tensor<1x4xf32>, tensor<4x4xf32>
    %gb = md.sum %h dims [0] {md.stream = 0 : i64} : tensor<1x4xf32> to tensor<4xf32>
    %g1 = md.flatten %gw {md.stream = 0 : i64} : tensor<4x4xf32> to tensor<16xf32>
    %g0 = md.flatten %gb {md.stream = 0 : i64} : tensor<4xf32> to tensor<4xf32>
    %f = md.flatten %g1, %g0 {md.bucket_buffer, md.record = 0 : i64, md.stream = 0 : i64} : tensor<16xf32>, tensor<4xf32> to tensor<20xf32>
    %r = md.all_reduce %f avg group world bucket 0 {md.record = 1 : i64, md.stream = 1 : i64, md.wait = array<i64: 0>} : tensor<20xf32>
    %z = md.scale %x by 2.0 {md.stream = 0 : i64} : tensor<1x4xf32>
    %r1 = md.view %r[0] {md.stream = 0 : i64, md.wait = array<i64: 1>} : tensor<20xf32> to tensor<16xf32>
    %n = md.global_norm %r1 squared {md.stream = 0 : i64} : tensor<16xf32> -> tensor<f32>
    %step = md.step {md.stream = 0 : i64} : i64
    %lr = md.lr %step {md.stream = 0 : i64} : f32
    %mom = md.state_load @u0.momentum {md.stream = 0 : i64} : tensor<20xf32>
    %p2, %b2 = md.sgd_update %m, %r momentum_buffer %mom, %lr, %step momentum 0.9 {md.stream = 0 : i64} : tensor<20xf32>, tensor<20xf32>
    md.state_store %p2, @u0.master {md.stream = 0 : i64} : tensor<20xf32>
    md.state_store %b2, @u0.momentum {md.stream = 0 : i64} : tensor<20xf32>
  } hooks {
  }
}

// -----

// Group sizes on a 2-D mesh of W ranks with shard groups of 2: a shard over
// `shard` has ceil(36 / 2) = 18 elements whatever W is, one over
// `replicate` ceil(36 / (W / 2)), one over `world` ceil(36 / W).

// W2-LABEL: md.model @hybrid
// W2-SAME: md.memory = {activations = 0 : i64, comm_buffers = 0 : i64, grad_acc = 0 : i64, grads = 0 : i64, optimizer = 216 : i64, params = 72 : i64, peak = 288 : i64, world_size = 2 : i64}
// W4-LABEL: md.model @hybrid
// W4-SAME: md.memory = {activations = 0 : i64, comm_buffers = 0 : i64, grad_acc = 0 : i64, grads = 0 : i64, optimizer = 108 : i64, params = 72 : i64, peak = 180 : i64, world_size = 4 : i64}
md.model @hybrid attributes {shard_group_size = 2 : i64} {
  md.state @u0.master : tensor<?xf32> shard(36) group shard role master unit 0
  md.state @u0.exp_avg : tensor<?xf32> shard(36) group replicate role exp_avg unit 0
  md.state @u0.exp_avg_sq : tensor<?xf32> shard(36) group world role exp_avg_sq unit 0
}
