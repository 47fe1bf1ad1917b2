// RUN: md-opt %s --md-bucketing --md-schedule --md-explain=world-size=2 -o /dev/null | FileCheck %s
// RUN: md-opt %s --md-bucketing --md-schedule --md-explain="world-size=4 format=json" -o /dev/null | FileCheck %s --check-prefix=JSON
// RUN: md-opt %s --md-bucketing --md-schedule --md-explain="world-size=4 format=json" -o /dev/null | python3 -m json.tool > /dev/null
// RUN: md-opt %s --md-explain=world-size=1 -o /dev/null | FileCheck %s --check-prefix=UNBUCKETED

// What mdc --explain prints, for a two-unit FSDP model (the shape of
// md-apply-plan and md-mixed-precision's output: bf16 compute, f32 master
// and reduction, AdamW, clipping, two micro-steps per step at W = 2).
//
// At W = 2: A = 8 / (2 x 2) = 2, so md.micro_steps' body runs once per step.
// Shards: unit 1 (36 elements) 18 per rank, unit 2 (15 elements) 8.
// all_gather sends (n - 1) x shard bytes: 36 + 16 per forward and per
// backward, plus unit 1's in the micro-step: 36 + 16 + 16 + 36 + 36 = 140.
// reduce_scatter: (n - 1) x 8 x 4 + (n - 1) x 18 x 4 = 104. The norm's
// all-reduce: 2 (n - 1) / n x 4 = 4.

// CHECK:      model @mlp, plan fsdp-full, world size 2
// CHECK-NEXT: batch: global 8, micro 2 per rank, 2 accumulation steps, effective batch 8
// CHECK-NEXT: parameters: 51 trainable in 4 tensors, 0 frozen in 0 tensors (no gradient, no optimizer state)
// CHECK:      memory per rank at W = 2, at the peak
// CHECK-NEXT:   params {{.*}} bytes)
// CHECK-NEXT:   grads {{.*}} bytes)
// CHECK-NEXT:   grad_acc             204 B  (204 bytes)
// CHECK-NEXT:   optimizer {{.*}} bytes)
// CHECK-NEXT:   activations {{.*}} bytes)
// CHECK-NEXT:   comm_buffers           0 B  (0 bytes)
// CHECK-NEXT:   peak {{.*}} bytes)
// CHECK:      communication per step per rank (bytes sent):
// CHECK-NEXT:   all_gather                   140
// CHECK-NEXT:   reduce_scatter               104
// CHECK-NEXT:   all_reduce                     4
// CHECK-NEXT:   broadcast                      0
// CHECK:      buckets:
// CHECK-NEXT:   id  kind            group     dtype          bytes  exposed_us  members
// CHECK-NEXT:   0   all_gather      world     bf16              72       10.00  u1
// CHECK-NEXT:   1   all_gather      world     bf16             102       10.00  u1 u2
// CHECK-NEXT:   2   all_gather      world     bf16             102       10.00  u2 u1
// CHECK-NEXT:   3   reduce_scatter  world     f32              204       10.00  u2 u1
// CHECK-NEXT:   4   all_reduce      world     f32                4       10.00  -
// CHECK:      precision:
// CHECK-NEXT:   casts:
// CHECK-NEXT:     bf16 -> f32 x2
// CHECK-NEXT:     f32 -> bf16 x9
// CHECK-NEXT:   collectives:
// CHECK-NEXT:     all_gather world bf16 bucket 0: 36 bytes sent, x1 per step
// CHECK-NEXT:     all_gather world bf16 bucket 1: 36 bytes sent, x1 per step
// CHECK-NEXT:     all_gather world bf16 bucket 1: 16 bytes sent, x1 per step
// CHECK-NEXT:     all_gather world bf16 bucket 2: 16 bytes sent, x1 per step
// CHECK-NEXT:     all_gather world bf16 bucket 2: 36 bytes sent, x1 per step
// CHECK-NEXT:     reduce_scatter world f32 bucket 3: 32 bytes sent, x1 per step
// CHECK-NEXT:     reduce_scatter world f32 bucket 3: 72 bytes sent, x1 per step
// CHECK-NEXT:     all_reduce world f32 bucket 4: 4 bytes sent, x1 per step

// At W = 4, A = 1: the micro-steps' gather runs no time and there is no
// accumulator; shards of 9 and 4.
// JSON:      {
// JSON-NEXT:   "model": "mlp",
// JSON-NEXT:   "plan": "fsdp-full",
// JSON-NEXT:   "world_size": 4,
// JSON-NEXT:   "batch": {
// JSON-NEXT:     "global": 8,
// JSON-NEXT:     "micro": 2,
// JSON-NEXT:     "accumulation_steps": 1,
// JSON-NEXT:     "effective": 8
// JSON-NEXT:   },
// JSON-NEXT:   "parameters": {
// JSON-NEXT:     "trainable": {
// JSON-NEXT:       "tensors": 4,
// JSON-NEXT:       "elements": 51
// JSON-NEXT:     },
// JSON-NEXT:     "frozen": {
// JSON-NEXT:       "tensors": 0,
// JSON-NEXT:       "elements": 0
// JSON-NEXT:     }
// JSON-NEXT:   },
// JSON-NEXT:   "memory": {
// JSON-NEXT:     "params": {{[0-9]+}},
// JSON-NEXT:     "grads": {{[0-9]+}},
// JSON-NEXT:     "grad_acc": 0,
// JSON-NEXT:     "optimizer": {{[0-9]+}},
// JSON-NEXT:     "activations": {{[0-9]+}},
// JSON-NEXT:     "comm_buffers": 0,
// JSON-NEXT:     "peak": {{[0-9]+}}
// JSON-NEXT:   },
// JSON:   "communication": {
// JSON-NEXT:     "all_gather": 156,
// JSON-NEXT:     "reduce_scatter": 156,
// JSON-NEXT:     "all_reduce": 6,
// JSON-NEXT:     "broadcast": 0
// JSON-NEXT:   },
// JSON-NEXT:   "buckets": [
// JSON-NEXT:     {
// JSON-NEXT:       "id": 0,
// JSON-NEXT:       "kind": "all_gather",
// JSON-NEXT:       "group": "world",
// JSON-NEXT:       "dtype": "bf16",
// JSON-NEXT:       "members": [
// JSON-NEXT:         "u1"
// JSON-NEXT:       ],
// JSON-NEXT:       "bytes": 72,
// JSON-NEXT:       "exposed_us": 10.00
// JSON-NEXT:     },
// JSON:        "precision": {
// JSON-NEXT:     "casts": [
// JSON-NEXT:       {
// JSON-NEXT:         "from": "bf16",
// JSON-NEXT:         "to": "f32",
// JSON-NEXT:         "count": 2
// JSON-NEXT:       },
// JSON:          "collectives": [
// JSON-NEXT:       {
// JSON-NEXT:         "kind": "all_gather",
// JSON-NEXT:         "group": "world",
// JSON-NEXT:         "dtype": "bf16",
// JSON-NEXT:         "bucket": 0,
// JSON-NEXT:         "bytes_sent": 54,
// JSON-NEXT:         "per_step": 0
// JSON-NEXT:       },

// Before md-bucketing there is no bucket table and collectives have no id.
// UNBUCKETED:      buckets: none
// UNBUCKETED:        all_gather world bf16: 0 bytes sent, x3 per step

md.model @mlp attributes {plan = #md.plan<name = "fsdp-full", preset = "fsdp-full", shard = full, wrap = blocks(fc), precision = {param = bf16, reduce = f32, buffer = f32, master = f32}, bucket_cap = 1048576, prefetch = {forward = true, backward = pre}, reshard_after_forward = true, checkpoint_activations = none>} {
  md.param @fc.0.weight : tensor<4x8xf32> init #md.init<normal(0.0, 0.02)> unit 1 offset 0
  md.param @fc.0.bias : tensor<4xf32> init #md.init<zeros> unit 1 offset 32
  md.param @fc.1.weight : tensor<3x4xf32> init #md.init<normal(0.0, 0.02)> unit 2 offset 0
  md.param @fc.1.bias : tensor<3xf32> init #md.init<zeros> unit 2 offset 12
  md.state @u1.master : tensor<?xf32> shard(36) group world role master unit 1
  md.state @u1.exp_avg : tensor<?xf32> shard(36) group world role exp_avg unit 1
  md.state @u1.exp_avg_sq : tensor<?xf32> shard(36) group world role exp_avg_sq unit 1
  md.state @u1.grad_acc : tensor<36xf32> role grad_acc unit 1
  md.state @u2.master : tensor<?xf32> shard(15) group world role master unit 2
  md.state @u2.exp_avg : tensor<?xf32> shard(15) group world role exp_avg unit 2
  md.state @u2.exp_avg_sq : tensor<?xf32> shard(15) group world role exp_avg_sq unit 2
  md.state @u2.grad_acc : tensor<15xf32> role grad_acc unit 2
  md.forward @forward(%x: tensor<2x8xf32>, %y: tensor<2xi32>) -> tensor<f32> {
    %l = md.sum %x dims [0, 1] : tensor<2x8xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 2
      optimizer #md.adamw<lr = 1.0e-3, beta1 = 0.9, beta2 = 0.999, eps = 1.0e-8, weight_decay = 0.01>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 clip_grad_norm 1.0 step {
    md.micro_steps {
      %x0, %y0 = md.batch : tensor<2x8xf32>, tensor<2xi32>
      %xb0 = md.cast %x0 : tensor<2x8xf32> to tensor<2x8xbf16>
      %m10 = md.state_load @u1.master : tensor<?xf32>
      %m1b0 = md.cast %m10 {md.unit = 1 : i64} : tensor<?xf32> to tensor<?xbf16>
      %p10 = md.all_gather %m1b0 group world {md.phase = "forward", md.unit = 1 : i64} : tensor<?xbf16> -> tensor<36xbf16>
      %w10 = md.view %p10[0] : tensor<36xbf16> to tensor<4x8xbf16>
      %b10 = md.view %p10[32] : tensor<36xbf16> to tensor<4xbf16>
      %h0 = md.matmul %xb0, %w10 bias %b10 transpose_b {md.unit = 1 : i64} : tensor<2x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16> -> tensor<2x4xbf16>
      %hf0 = md.cast %h0 : tensor<2x4xbf16> to tensor<2x4xf32>
      %l0 = md.sum %hf0 dims [0, 1] : tensor<2x4xf32> to tensor<f32>
      md.record_loss %l0 : tensor<f32>
      %s0 = md.accum_scale : tensor<f32>
      %dh0 = md.sum_grad %s0 dims [0, 1] {md.backward} : tensor<f32> to tensor<2x4xf32>
      %dhb0 = md.cast %dh0 : tensor<2x4xf32> to tensor<2x4xbf16>
      %dx0, %dw0, %db0 = md.matmul_grad %dhb0, %xb0, %w10 transpose_b has_bias {md.backward, md.unit = 1 : i64} : tensor<2x4xbf16>, tensor<2x8xbf16>, tensor<4x8xbf16> -> tensor<2x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16>
      %g0 = md.flatten %dw0, %db0 {md.unit = 1 : i64} : tensor<4x8xbf16>, tensor<4xbf16> to tensor<36xbf16>
      md.grad_accumulate %g0 into @u1.grad_acc : tensor<36xbf16>
      %zero = md.scale %hf0 by 0.0 : tensor<2x4xf32>
      %z2 = md.flatten %zero : tensor<2x4xf32> to tensor<15xf32>
      md.grad_accumulate %z2 into @u2.grad_acc : tensor<15xf32>
    }
    %x, %y = md.batch : tensor<2x8xf32>, tensor<2xi32>
    %xb = md.cast %x : tensor<2x8xf32> to tensor<2x8xbf16>
    %m1 = md.state_load @u1.master : tensor<?xf32>
    %m1b = md.cast %m1 {md.unit = 1 : i64} : tensor<?xf32> to tensor<?xbf16>
    %p1 = md.all_gather %m1b group world {md.phase = "forward", md.unit = 1 : i64} : tensor<?xbf16> -> tensor<36xbf16>
    %w1 = md.view %p1[0] : tensor<36xbf16> to tensor<4x8xbf16>
    %b1 = md.view %p1[32] : tensor<36xbf16> to tensor<4xbf16>
    %h = md.matmul %xb, %w1 bias %b1 transpose_b {md.unit = 1 : i64} : tensor<2x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16> -> tensor<2x4xbf16>
    %r = md.relu %h {md.unit = 1 : i64} : tensor<2x4xbf16>
    %m2 = md.state_load @u2.master : tensor<?xf32>
    %m2b = md.cast %m2 {md.unit = 2 : i64} : tensor<?xf32> to tensor<?xbf16>
    %p2 = md.all_gather %m2b group world {md.phase = "forward", md.unit = 2 : i64} : tensor<?xbf16> -> tensor<15xbf16>
    %w2 = md.view %p2[0] : tensor<15xbf16> to tensor<3x4xbf16>
    %b2 = md.view %p2[12] : tensor<15xbf16> to tensor<3xbf16>
    %logits = md.matmul %r, %w2 bias %b2 transpose_b {md.unit = 2 : i64} : tensor<2x4xbf16>, tensor<3x4xbf16>, tensor<3xbf16> -> tensor<2x3xbf16>
    %lf = md.cast %logits : tensor<2x3xbf16> to tensor<2x3xf32>
    %loss = md.cross_entropy %lf, %y : tensor<2x3xf32>, tensor<2xi32> -> tensor<f32>
    md.record_loss %loss : tensor<f32>
    %s = md.accum_scale : tensor<f32>
    %dl = md.cross_entropy_grad %s, %lf, %y {md.backward} : tensor<f32>, tensor<2x3xf32>, tensor<2xi32>
    %dlb = md.cast %dl : tensor<2x3xf32> to tensor<2x3xbf16>
    %n2 = md.state_load @u2.master : tensor<?xf32>
    %n2b = md.cast %n2 {md.unit = 2 : i64} : tensor<?xf32> to tensor<?xbf16>
    %q2 = md.all_gather %n2b group world {md.phase = "backward", md.unit = 2 : i64} : tensor<?xbf16> -> tensor<15xbf16>
    %v2 = md.view %q2[0] : tensor<15xbf16> to tensor<3x4xbf16>
    %dr, %dw2, %db2 = md.matmul_grad %dlb, %r, %v2 transpose_b has_bias {md.unit = 2 : i64, md.backward} : tensor<2x3xbf16>, tensor<2x4xbf16>, tensor<3x4xbf16> -> tensor<2x4xbf16>, tensor<3x4xbf16>, tensor<3xbf16>
    %g2 = md.flatten %dw2, %db2 {md.unit = 2 : i64} : tensor<3x4xbf16>, tensor<3xbf16> to tensor<15xbf16>
    %t2 = md.grad_total %g2 from @u2.grad_acc {md.unit = 2 : i64} : tensor<15xbf16> -> tensor<15xf32>
    %s2 = md.reduce_scatter %t2 avg group world {md.unit = 2 : i64} : tensor<15xf32> -> tensor<?xf32>
    %n1 = md.state_load @u1.master : tensor<?xf32>
    %n1b = md.cast %n1 {md.unit = 1 : i64} : tensor<?xf32> to tensor<?xbf16>
    %q1 = md.all_gather %n1b group world {md.phase = "backward", md.unit = 1 : i64} : tensor<?xbf16> -> tensor<36xbf16>
    %v1 = md.view %q1[0] : tensor<36xbf16> to tensor<4x8xbf16>
    %dh = md.relu_grad %dr, %h {md.unit = 1 : i64, md.backward} : tensor<2x4xbf16>
    %dx, %dw1, %db1 = md.matmul_grad %dh, %xb, %v1 transpose_b has_bias {md.unit = 1 : i64, md.backward} : tensor<2x4xbf16>, tensor<2x8xbf16>, tensor<4x8xbf16> -> tensor<2x8xbf16>, tensor<4x8xbf16>, tensor<4xbf16>
    %g1 = md.flatten %dw1, %db1 {md.unit = 1 : i64} : tensor<4x8xbf16>, tensor<4xbf16> to tensor<36xbf16>
    %t1 = md.grad_total %g1 from @u1.grad_acc {md.unit = 1 : i64} : tensor<36xbf16> -> tensor<36xf32>
    %s1 = md.reduce_scatter %t1 avg group world {md.unit = 1 : i64} : tensor<36xf32> -> tensor<?xf32>
    %sq = md.global_norm %s1, %s2 squared : tensor<?xf32>, tensor<?xf32> -> tensor<f32>
    %sqt = md.all_reduce %sq sum group world : tensor<f32>
    %norm = md.sqrt %sqt : tensor<f32>
    %c1, %c2 = md.clip %s1, %s2, %norm max_norm 1.0 : tensor<?xf32>, tensor<?xf32>
    %step = md.step : i64
    %lr = md.lr %step : f32
    %e1 = md.state_load @u1.exp_avg : tensor<?xf32>
    %f1 = md.state_load @u1.exp_avg_sq : tensor<?xf32>
    %o1, %oe1, %of1 = md.adamw_update %m1, %c1, %e1, %f1, %lr, %step beta1 0.9 beta2 0.999 eps 1.0e-08 weight_decay 0.01 : tensor<?xf32>, tensor<?xf32>
    md.state_store %o1, @u1.master : tensor<?xf32>
    md.state_store %oe1, @u1.exp_avg : tensor<?xf32>
    md.state_store %of1, @u1.exp_avg_sq : tensor<?xf32>
    %e2 = md.state_load @u2.exp_avg : tensor<?xf32>
    %f2 = md.state_load @u2.exp_avg_sq : tensor<?xf32>
    %o2, %oe2, %of2 = md.adamw_update %m2, %c2, %e2, %f2, %lr, %step beta1 0.9 beta2 0.999 eps 1.0e-08 weight_decay 0.01 : tensor<?xf32>, tensor<?xf32>
    md.state_store %o2, @u2.master : tensor<?xf32>
    md.state_store %oe2, @u2.exp_avg : tensor<?xf32>
    md.state_store %of2, @u2.exp_avg_sq : tensor<?xf32>
  } hooks {
  }
}
