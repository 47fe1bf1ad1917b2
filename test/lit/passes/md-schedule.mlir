// RUN: md-opt %s -split-input-file --md-schedule | FileCheck %s
// RUN: md-opt %s -split-input-file --md-schedule="forward-prefetch=off backward-prefetch=none" | FileCheck %s --check-prefix=OFF
// RUN: md-opt %s -split-input-file --md-schedule="backward-prefetch=post" | FileCheck %s --check-prefix=POST
// RUN: md-opt %s -split-input-file --md-schedule="max-inflight-gathers=1" | FileCheck %s --check-prefix=OFF
// The plan's max_inflight_allgathers (md.max_inflight_allgathers) when the
// option is not given; the option overrides it.
// RUN: sed 's/md.model @fsdp attributes {plan/md.model @fsdp attributes {md.max_inflight_allgathers = 1 : i64, plan/' %s | md-opt -split-input-file --md-schedule | FileCheck %s --check-prefix=OFF
// RUN: sed 's/md.model @fsdp attributes {plan/md.model @fsdp attributes {md.max_inflight_allgathers = 1 : i64, plan/' %s | md-opt -split-input-file --md-schedule=max-inflight-gathers=2 | FileCheck %s
// Scheduling a scheduled program changes nothing.
// RUN: md-opt %s -split-input-file --md-schedule | md-opt -split-input-file --md-schedule | FileCheck %s
// RUN: md-opt %s -split-input-file --md-schedule > %t.once
// RUN: md-opt %t.once -split-input-file --md-schedule > %t.twice
// RUN: diff %t.once %t.twice

// FSDP with reshard_after_forward, two units. The plan prefetches forward
// and backward (pre): unit 2's forward all-gather, with the load and cast of
// its shard, goes before unit 1's first forward op; unit 1's backward
// all-gather before unit 2's gradient. Collectives run on stream 1; each
// value crossing streams is recorded by its producer and waited for by its
// users; events are numbered in execution order.

// CHECK-LABEL: md.model @fsdp
// CHECK:      %[[X:.*]] = md.batch {md.stream = 0 : i64}
// CHECK-NEXT: %[[M1:.*]] = md.state_load @u1.master {md.stream = 0 : i64}
// CHECK-NEXT: %[[C1:.*]] = md.cast %[[M1]] {md.record = 0 : i64, md.stream = 0 : i64}
// CHECK-NEXT: %[[P1:.*]] = md.all_gather %[[C1]] group world {md.phase = "forward", md.record = 1 : i64, md.stream = 1 : i64, md.unit = 1 : i64, md.wait = array<i64: 0>}
// CHECK-NEXT: %[[W1:.*]] = md.view %[[P1]][0] {md.stream = 0 : i64, md.wait = array<i64: 1>}
// CHECK-NEXT: %[[M2:.*]] = md.state_load @u2.master {md.stream = 0 : i64}
// CHECK-NEXT: %[[C2:.*]] = md.cast %[[M2]] {md.record = 2 : i64, md.stream = 0 : i64}
// CHECK-NEXT: %[[P2:.*]] = md.all_gather %[[C2]] group world {md.phase = "forward", md.record = 3 : i64, md.stream = 1 : i64, md.unit = 2 : i64, md.wait = array<i64: 2>}
// CHECK-NEXT: %[[H:.*]] = md.matmul %[[X]], %[[W1]] {md.stream = 0 : i64, md.unit = 1 : i64}
// CHECK-NEXT: %[[W2:.*]] = md.view %[[P2]][0] {md.stream = 0 : i64, md.wait = array<i64: 3>}
// CHECK-NEXT: %[[Y:.*]] = md.matmul %[[H]], %[[W2]] {md.stream = 0 : i64, md.unit = 2 : i64}
// CHECK-NEXT: %[[L:.*]] = md.sum %[[Y]]
// CHECK-NEXT: md.record_loss %[[L]]
// CHECK-NEXT: md.sum_grad
// CHECK-NEXT: %[[N2:.*]] = md.state_load @u2.master
// CHECK-NEXT: %[[D2:.*]] = md.cast %[[N2]] {md.record = 4 : i64
// CHECK-NEXT: %[[Q2:.*]] = md.all_gather %[[D2]] group world {md.phase = "backward", md.record = 5 : i64, md.stream = 1 : i64, md.unit = 2 : i64, md.wait = array<i64: 4>}
// CHECK-NEXT: %[[V2:.*]] = md.view %[[Q2]][0] {md.stream = 0 : i64, md.wait = array<i64: 5>}
// CHECK-NEXT: %[[N1:.*]] = md.state_load @u1.master
// CHECK-NEXT: %[[D1:.*]] = md.cast %[[N1]] {md.record = 6 : i64
// CHECK-NEXT: %[[Q1:.*]] = md.all_gather %[[D1]] group world {md.phase = "backward", md.record = 7 : i64, md.stream = 1 : i64, md.unit = 1 : i64, md.wait = array<i64: 6>}
// CHECK-NEXT: %[[DH:.*]], %[[DW2:.*]] = md.matmul_grad %{{.*}}, %[[H]], %[[V2]] {md.backward, md.stream = 0 : i64, md.unit = 2 : i64}
// CHECK-NEXT: %[[G2:.*]] = md.flatten %[[DW2]] {md.record = 8 : i64, md.stream = 0 : i64, md.unit = 2 : i64}
// CHECK-NEXT: %[[S2:.*]] = md.reduce_scatter %[[G2]] avg group world {md.record = 9 : i64, md.stream = 1 : i64, md.unit = 2 : i64, md.wait = array<i64: 8>}
// CHECK-NEXT: %[[V1:.*]] = md.view %[[Q1]][0] {md.stream = 0 : i64, md.wait = array<i64: 7>}
// CHECK-NEXT: md.matmul_grad %[[DH]], %[[X]], %[[V1]] {md.backward, md.stream = 0 : i64, md.unit = 1 : i64}

// Without prefetch the order is the program's; a cap of one gathered unit
// leaves no room for a prefetch either.
// OFF-LABEL: md.model @fsdp
// OFF:      md.all_gather {{.*}}md.phase = "forward", {{.*}}md.unit = 1
// OFF:      md.matmul {{.*}}md.unit = 1
// OFF:      md.all_gather {{.*}}md.phase = "forward", {{.*}}md.unit = 2
// OFF:      md.all_gather {{.*}}md.phase = "backward", {{.*}}md.unit = 2
// OFF:      md.matmul_grad {{.*}}md.unit = 2
// OFF:      md.reduce_scatter {{.*}}md.unit = 2
// OFF:      md.all_gather {{.*}}md.phase = "backward", {{.*}}md.unit = 1

// Backward prefetch `post`: unit 1's backward all-gather right after unit
// 2's last use of its gathered parameters, before unit 2's reduce-scatter.
// POST-LABEL: md.model @fsdp
// POST:      md.all_gather {{.*}}md.phase = "backward", {{.*}}md.unit = 2
// POST:      md.matmul_grad {{.*}}md.unit = 2
// POST-NEXT: md.state_load @u1.master
// POST-NEXT: md.cast
// POST-NEXT: md.all_gather {{.*}}md.phase = "backward", {{.*}}md.unit = 1
// POST-NEXT: md.flatten
// POST-NEXT: md.reduce_scatter {{.*}}md.unit = 2
md.model @fsdp attributes {plan = #md.plan<name = "fsdp-full", preset = "fsdp-full", shard = full, wrap = blocks(fc), precision = {param = f32, reduce = f32, buffer = f32, master = f32}, bucket_cap = 26214400, prefetch = {forward = true, backward = pre}, reshard_after_forward = true, checkpoint_activations = none>} {
  md.state @u1.master : tensor<?xf32> shard(64) group world role master unit 1
  md.state @u2.master : tensor<?xf32> shard(64) group world role master unit 2
  md.forward @forward(%x: tensor<8x8xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0, 1] : tensor<8x8xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 8
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    %x = md.batch : tensor<8x8xf32>
    %m1 = md.state_load @u1.master : tensor<?xf32>
    %c1 = md.cast %m1 : tensor<?xf32> to tensor<?xf32>
    %p1 = md.all_gather %c1 group world {md.phase = "forward", md.unit = 1 : i64} : tensor<?xf32> -> tensor<64xf32>
    %w1 = md.view %p1[0] : tensor<64xf32> to tensor<8x8xf32>
    %h = md.matmul %x, %w1 {md.unit = 1 : i64} : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
    %m2 = md.state_load @u2.master : tensor<?xf32>
    %c2 = md.cast %m2 : tensor<?xf32> to tensor<?xf32>
    %p2 = md.all_gather %c2 group world {md.phase = "forward", md.unit = 2 : i64} : tensor<?xf32> -> tensor<64xf32>
    %w2 = md.view %p2[0] : tensor<64xf32> to tensor<8x8xf32>
    %y = md.matmul %h, %w2 {md.unit = 2 : i64} : tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>
    %l = md.sum %y dims [0, 1] : tensor<8x8xf32> to tensor<f32>
    md.record_loss %l : tensor<f32>
    %dy = md.sum_grad %l dims [0, 1] {md.backward} : tensor<f32> to tensor<8x8xf32>
    %n2 = md.state_load @u2.master : tensor<?xf32>
    %d2 = md.cast %n2 : tensor<?xf32> to tensor<?xf32>
    %q2 = md.all_gather %d2 group world {md.phase = "backward", md.unit = 2 : i64} : tensor<?xf32> -> tensor<64xf32>
    %v2 = md.view %q2[0] : tensor<64xf32> to tensor<8x8xf32>
    %dh, %dw2 = md.matmul_grad %dy, %h, %v2 {md.backward, md.unit = 2 : i64} : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>, tensor<8x8xf32>
    %g2 = md.flatten %dw2 {md.unit = 2 : i64} : tensor<8x8xf32> to tensor<64xf32>
    %s2 = md.reduce_scatter %g2 avg group world {md.unit = 2 : i64} : tensor<64xf32> -> tensor<?xf32>
    %n1 = md.state_load @u1.master : tensor<?xf32>
    %d1 = md.cast %n1 : tensor<?xf32> to tensor<?xf32>
    %q1 = md.all_gather %d1 group world {md.phase = "backward", md.unit = 1 : i64} : tensor<?xf32> -> tensor<64xf32>
    %v1 = md.view %q1[0] : tensor<64xf32> to tensor<8x8xf32>
    %dx, %dw1 = md.matmul_grad %dh, %x, %v1 {md.backward, md.unit = 1 : i64} : tensor<8x8xf32>, tensor<8x8xf32>, tensor<8x8xf32> -> tensor<8x8xf32>, tensor<8x8xf32>
    %g1 = md.flatten %dw1 {md.unit = 1 : i64} : tensor<8x8xf32> to tensor<64xf32>
    %s1 = md.reduce_scatter %g1 avg group world {md.unit = 1 : i64} : tensor<64xf32> -> tensor<?xf32>
    %a1 = md.state_load @u1.master : tensor<?xf32>
    %b1 = md.sub %a1, %s1 : tensor<?xf32>, tensor<?xf32> -> tensor<?xf32>
    md.state_store %b1, @u1.master : tensor<?xf32>
    %a2 = md.state_load @u2.master : tensor<?xf32>
    %b2 = md.sub %a2, %s2 : tensor<?xf32>, tensor<?xf32> -> tensor<?xf32>
    md.state_store %b2, @u2.master : tensor<?xf32>
  } hooks {
  }
}

// -----

// The collectives of a bucket are issued together, as soon as the last one's
// input is ready. Reads and writes of one md.state keep their order (the
// second load of @u1.master stays after the store). Inside md.micro_steps the
// body is scheduled on its own; a value from outside the loop used on the
// comm stream inside it is waited for there. The hooks are not scheduled.

// CHECK-LABEL: md.model @buckets
// CHECK:      %[[E:.*]] = md.accum_scale {md.record = 0 : i64, md.stream = 0 : i64}
// CHECK-NEXT: md.micro_steps attributes {md.stream = 0 : i64} {
// CHECK-NEXT:   md.batch {md.stream = 0 : i64}
// CHECK-NEXT:   md.all_reduce %[[E]] sum group world {md.stream = 1 : i64, md.wait = array<i64: 0>} : tensor<f32>
// CHECK-NEXT: }
// CHECK-NEXT: %[[X:.*]] = md.batch
// CHECK-NEXT: %[[G2:.*]] = md.flatten %[[X]] {md.record = 1 : i64
// CHECK-NEXT: %[[Y:.*]] = md.scale %[[X]]
// CHECK-NEXT: %[[G1:.*]] = md.flatten %[[Y]] {md.record = 2 : i64
// CHECK-NEXT: md.reduce_scatter %[[G2]] avg group world bucket 0 {md.stream = 1 : i64, md.unit = 2 : i64, md.wait = array<i64: 1>}
// CHECK-NEXT: md.reduce_scatter %[[G1]] avg group world bucket 0 {md.stream = 1 : i64, md.unit = 1 : i64, md.wait = array<i64: 2>}
// CHECK-NEXT: %[[M:.*]] = md.state_load @u1.master
// CHECK-NEXT: md.state_store %[[M]], @u1.master
// CHECK-NEXT: md.state_load @u1.master
// CHECK:      } hooks {
// CHECK-NEXT:   md.loss : tensor<f32>
md.model @buckets {
  md.state @u1.master : tensor<?xf32> shard(16) group world role master unit 1
  md.forward @forward(%x: tensor<16xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<16xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 8 micro_batch 4
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    %e = md.accum_scale : tensor<f32>
    md.micro_steps {
      %b = md.batch : tensor<16xf32>
      %r = md.all_reduce %e sum group world : tensor<f32>
    }
    %x = md.batch : tensor<16xf32>
    %g2 = md.flatten %x : tensor<16xf32> to tensor<16xf32>
    %s2 = md.reduce_scatter %g2 avg group world bucket 0 {md.unit = 2 : i64} : tensor<16xf32> -> tensor<?xf32>
    %y = md.scale %x by 2.0 : tensor<16xf32>
    %g1 = md.flatten %y : tensor<16xf32> to tensor<16xf32>
    %s1 = md.reduce_scatter %g1 avg group world bucket 0 {md.unit = 1 : i64} : tensor<16xf32> -> tensor<?xf32>
    %m = md.state_load @u1.master : tensor<?xf32>
    md.state_store %m, @u1.master : tensor<?xf32>
    %n = md.state_load @u1.master : tensor<?xf32>
  } hooks {
    %l = md.loss : tensor<f32>
  }
}
