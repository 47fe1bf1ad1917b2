// RUN: md-opt %s -split-input-file --md-bucketing=bucket-cap=1048576 | FileCheck %s
// RUN: md-opt %s -split-input-file --md-bucketing="bucket-cap=64" | FileCheck %s --check-prefix=CAP
// RUN: md-opt %s -split-input-file --md-bucketing="bucket-cap=26214400 compute-tflops=10" | FileCheck %s --check-prefix=SLOW
// RUN: md-opt %s -split-input-file --md-bucketing="bucket-cap=26214400 compute-tflops=1000" | FileCheck %s --check-prefix=FAST
// RUN: md-opt %s -split-input-file --md-bucketing="bucket-cap=26214400 compute-tflops=10 interconnect=pcie" | FileCheck %s --check-prefix=PCIE
// RUN: md-opt %s -split-input-file --md-bucketing="bucket-cap=26214400 compute-tflops=10 alpha-us=20 beta-gbps=12" | FileCheck %s --check-prefix=PCIE
// RUN: md-opt %s -split-input-file --md-bucketing=bucket-cap=1048576 | md-opt -split-input-file | FileCheck %s
// Bucketing bucketed IR changes nothing.
// RUN: md-opt %s -split-input-file --md-bucketing=bucket-cap=1048576 > %t.once
// RUN: md-opt %t.once -split-input-file --md-bucketing=bucket-cap=1048576 > %t.twice
// RUN: diff %t.once %t.twice

// DDP: the gradient all-reduces of two units (backward order: unit 2 first)
// go into one flat bucket; the scale that used unit 2's reduced gradient
// moves after the bucket and reads its view. The clipping norm's all-reduce
// of a scalar is a bucket of its own.

// CHECK-LABEL: md.model @ddp_packed
// CHECK-SAME: md.bucket_table = [{bytes = 80 : i64, dtype = f32, exposed_us = {{.*}}, group = "world", id = 0 : i64, kind = "all_reduce", members = ["u2", "u1"]}, {bytes = 4 : i64, dtype = f32, exposed_us = 1.000000e+01 : f64, group = "world", id = 1 : i64, kind = "all_reduce", members = ["-"]}]
// CHECK: %[[H:.*]] = md.matmul
// CHECK-NEXT: %[[G2:.*]] = md.flatten %[[H]] {md.unit = 2 : i64}
// CHECK-NEXT: %[[G1:.*]] = md.flatten %[[X:.*]] {md.unit = 1 : i64}
// CHECK-NEXT: %[[F:.*]] = md.flatten %[[G2]], %[[G1]] {md.bucket_buffer} : tensor<4xf32>, tensor<16xf32> to tensor<20xf32>
// CHECK-NEXT: %[[R:.*]] = md.all_reduce %[[F]] avg group world bucket 0 {md.units = array<i64: 2, 1>} : tensor<20xf32>
// CHECK-NEXT: %[[R2:.*]] = md.view %[[R]][0] {md.unit = 2 : i64} : tensor<20xf32> to tensor<4xf32>
// CHECK-NEXT: %[[R1:.*]] = md.view %[[R]][4] {md.unit = 1 : i64} : tensor<20xf32> to tensor<16xf32>
// CHECK-NEXT: %[[C2:.*]] = md.scale %[[R2]] by
// CHECK-NEXT: %[[N:.*]] = md.global_norm %[[C2]], %[[R1]] squared
// CHECK-NEXT: md.all_reduce %[[N]] sum group world bucket 1 : tensor<f32>

// Under a 64-byte cap the two gradients (16 + 64 bytes) cannot share.
// CAP-LABEL: md.model @ddp_packed
// CAP-SAME: members = ["u2"]
// CAP-SAME: members = ["u1"]
// CAP-NOT: md.bucket_buffer
// CAP: md.all_reduce %{{.*}} avg group world bucket 0 {md.unit = 2 : i64} : tensor<4xf32>
// CAP: md.all_reduce %{{.*}} avg group world bucket 1 {md.unit = 1 : i64} : tensor<16xf32>
// CAP: md.all_reduce %{{.*}} sum group world bucket 2 : tensor<f32>
md.model @ddp_packed {
  md.forward @forward(%x: tensor<2x8xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0, 1] : tensor<2x8xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 2 micro_batch 2
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    %x = md.batch : tensor<2x8xf32>
    %h = md.matmul %x, %x transpose_b : tensor<2x8xf32>, tensor<2x8xf32> -> tensor<2x2xf32>
    %g2 = md.flatten %h {md.unit = 2 : i64} : tensor<2x2xf32> to tensor<4xf32>
    %r2 = md.all_reduce %g2 avg group world {md.unit = 2 : i64} : tensor<4xf32>
    %c2 = md.scale %r2 by 2.0 : tensor<4xf32>
    %g1 = md.flatten %x {md.unit = 1 : i64} : tensor<2x8xf32> to tensor<16xf32>
    %r1 = md.all_reduce %g1 avg group world {md.unit = 1 : i64} : tensor<16xf32>
    %n = md.global_norm %c2, %r1 squared : tensor<4xf32>, tensor<16xf32> -> tensor<f32>
    %nt = md.all_reduce %n sum group world : tensor<f32>
  } hooks {
  }
}

// -----

// The cost model. Three 4 MiB gradients, each after a 1024^3 product
// (2.1 GFLOP). An all-reduce of one takes 10 us + 2 x 4 MiB / 150 GB/s
// = 66 us on NVLink.
//
// At 10 TFLOP/s a product takes 215 us: each gradient's all-reduce hides
// behind the next product, so three buckets finish first.
// SLOW-LABEL: md.model @cost_model
// SLOW-SAME: exposed_us = 0.000000e+00 : f64, group = "world", id = 0 : i64, kind = "all_reduce", members = ["u3"]
// SLOW-SAME: exposed_us = 0.000000e+00 : f64, group = "world", id = 1 : i64, kind = "all_reduce", members = ["u2"]
// SLOW-SAME: exposed_us = 6.592400e+01 : f64, group = "world", id = 2 : i64, kind = "all_reduce", members = ["u1"]
// SLOW-NOT: md.bucket_buffer
//
// Over PCIe (20 us, 12 GB/s) a transfer takes 719 us, longer than the
// products: the last two gradients share a bucket and save one latency
// (2352 us against 2372 us for three buckets).
// PCIE-LABEL: md.model @cost_model
// PCIE-SAME: members = ["u3"]
// PCIE-SAME: members = ["u2", "u1"]
// PCIE: md.flatten {{.*}} {md.bucket_buffer} : tensor<1048576xf32>, tensor<1048576xf32> to tensor<2097152xf32>
//
// At 1000 TFLOP/s a product takes 2 us: nothing hides the transfers, and one
// bucket pays the latency once (10 + 168 us) instead of three times.
// FAST-LABEL: md.model @cost_model
// FAST-SAME: md.bucket_table = [{bytes = 12582912 : i64
// FAST-SAME: members = ["u3", "u2", "u1"]
// FAST: md.flatten {{.*}} {md.bucket_buffer} : tensor<1048576xf32>, tensor<1048576xf32>, tensor<1048576xf32> to tensor<3145728xf32>
md.model @cost_model {
  md.forward @forward(%x: tensor<1024x1024xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0, 1] : tensor<1024x1024xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 2 micro_batch 2
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    %x = md.batch : tensor<1024x1024xf32>
    %a3 = md.matmul %x, %x : tensor<1024x1024xf32>, tensor<1024x1024xf32> -> tensor<1024x1024xf32>
    %g3 = md.flatten %a3 {md.unit = 3 : i64} : tensor<1024x1024xf32> to tensor<1048576xf32>
    %r3 = md.all_reduce %g3 avg group world {md.unit = 3 : i64} : tensor<1048576xf32>
    %a2 = md.matmul %a3, %x : tensor<1024x1024xf32>, tensor<1024x1024xf32> -> tensor<1024x1024xf32>
    %g2 = md.flatten %a2 {md.unit = 2 : i64} : tensor<1024x1024xf32> to tensor<1048576xf32>
    %r2 = md.all_reduce %g2 avg group world {md.unit = 2 : i64} : tensor<1048576xf32>
    %a1 = md.matmul %a2, %x : tensor<1024x1024xf32>, tensor<1024x1024xf32> -> tensor<1024x1024xf32>
    %g1 = md.flatten %a1 {md.unit = 1 : i64} : tensor<1024x1024xf32> to tensor<1048576xf32>
    %r1 = md.all_reduce %g1 avg group world {md.unit = 1 : i64} : tensor<1048576xf32>
  } hooks {
  }
}

// -----

// FSDP: reduce-scatters share a bucket id but keep their own ops (the shard
// of a concatenation is not the concatenation of shards): unit 2's moves next
// to unit 1's, and the cast of its shard after both. Of the forward
// all-gathers, the two latency-bound ones (under alpha x beta = 1.5 MB on
// NVLink) form a bucket, unit 2's moving up with the load and cast of its
// shard; unit 3's 2 MiB gather is bandwidth-bound and goes alone.

// CHECK-LABEL: md.model @fsdp
// CHECK-SAME: {bytes = 102 : i64, dtype = bf16, {{.*}}, id = 0 : i64, kind = "all_gather", members = ["u1", "u2"]}
// CHECK-SAME: {bytes = 2097152 : i64, dtype = bf16, {{.*}}, id = 1 : i64, kind = "all_gather", members = ["u3"]}
// CHECK-SAME: {bytes = 204 : i64, dtype = f32, {{.*}}, id = 2 : i64, kind = "reduce_scatter", members = ["u2", "u1"]}
// CHECK: %[[M1:.*]] = md.state_load @u1.master
// CHECK-NEXT: %[[C1:.*]] = md.cast %[[M1]]
// CHECK-NEXT: %[[M2:.*]] = md.state_load @u2.master
// CHECK-NEXT: %[[C2:.*]] = md.cast %[[M2]]
// CHECK-NEXT: md.all_gather %[[C1]] group world bucket 0 {md.phase = "forward", md.unit = 1 : i64} : tensor<?xbf16> -> tensor<36xbf16>
// CHECK-NEXT: md.all_gather %[[C2]] group world bucket 0 {md.phase = "forward", md.unit = 2 : i64} : tensor<?xbf16> -> tensor<15xbf16>
// CHECK: md.all_gather %{{.*}} group world bucket 1 {md.phase = "forward", md.unit = 3 : i64} : tensor<?xbf16> -> tensor<1048576xbf16>
// CHECK: %[[T1:.*]] = md.flatten %{{.*}} {md.unit = 1 : i64} : tensor<36xf32> to tensor<36xf32>
// CHECK-NEXT: %[[S2:.*]] = md.reduce_scatter %{{.*}} avg group world bucket 2 {md.unit = 2 : i64} : tensor<15xf32> -> tensor<?xf32>
// CHECK-NEXT: %[[S1:.*]] = md.reduce_scatter %[[T1]] avg group world bucket 2 {md.unit = 1 : i64} : tensor<36xf32> -> tensor<?xf32>
// CHECK-NEXT: md.cast %[[S2]] : tensor<?xf32> to tensor<?xbf16>
// CHECK-NOT: md.bucket_buffer
md.model @fsdp {
  md.state @u1.master : tensor<?xf32> shard(36) group world role master unit 1
  md.state @u2.master : tensor<?xf32> shard(15) group world role master unit 2
  md.state @u3.master : tensor<?xf32> shard(1048576) group world role master unit 3
  md.forward @forward(%x: tensor<2x36xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0, 1] : tensor<2x36xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 2 micro_batch 2
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    %x = md.batch : tensor<2x36xf32>
    %m1 = md.state_load @u1.master : tensor<?xf32>
    %c1 = md.cast %m1 : tensor<?xf32> to tensor<?xbf16>
    %p1 = md.all_gather %c1 group world {md.phase = "forward", md.unit = 1 : i64} : tensor<?xbf16> -> tensor<36xbf16>
    %f1 = md.cast %p1 : tensor<36xbf16> to tensor<36xf32>
    %y1 = md.mul %x, %f1 : tensor<2x36xf32>, tensor<36xf32> -> tensor<2x36xf32>
    %m2 = md.state_load @u2.master : tensor<?xf32>
    %c2 = md.cast %m2 : tensor<?xf32> to tensor<?xbf16>
    %p2 = md.all_gather %c2 group world {md.phase = "forward", md.unit = 2 : i64} : tensor<?xbf16> -> tensor<15xbf16>
    %m3 = md.state_load @u3.master : tensor<?xf32>
    %c3 = md.cast %m3 : tensor<?xf32> to tensor<?xbf16>
    %p3 = md.all_gather %c3 group world {md.phase = "forward", md.unit = 3 : i64} : tensor<?xbf16> -> tensor<1048576xbf16>
    %f2 = md.cast %p2 : tensor<15xbf16> to tensor<15xf32>
    %t2 = md.flatten %f2 {md.unit = 2 : i64} : tensor<15xf32> to tensor<15xf32>
    %s2 = md.reduce_scatter %t2 avg group world {md.unit = 2 : i64} : tensor<15xf32> -> tensor<?xf32>
    %h2 = md.cast %s2 : tensor<?xf32> to tensor<?xbf16>
    %t1 = md.flatten %y1 {md.unit = 1 : i64} : tensor<2x36xf32> to tensor<72xf32>
    %u1 = md.view %t1[0] : tensor<72xf32> to tensor<36xf32>
    %v1 = md.flatten %u1 {md.unit = 1 : i64} : tensor<36xf32> to tensor<36xf32>
    %s1 = md.reduce_scatter %v1 avg group world {md.unit = 1 : i64} : tensor<36xf32> -> tensor<?xf32>
  } hooks {
  }
}

// -----

// HSDP: each unit's gradient is reduce-scattered in its shard group and its
// shard all-reduced across the replicas. The reduce-scatters form one bucket
// and the all-reduces another (shards: not packed); unit 2's all-reduce,
// which uses its reduce-scatter, moves after the reduce-scatter bucket.

// CHECK-LABEL: md.model @hybrid
// CHECK-SAME: {bytes = 204 : i64, dtype = f32, {{.*}}, group = "shard", id = 0 : i64, kind = "reduce_scatter", members = ["u2", "u1"]}
// CHECK-SAME: {bytes = 104 : i64, dtype = f32, {{.*}}, group = "replicate", id = 1 : i64, kind = "all_reduce", members = ["u2", "u1"]}
// CHECK: %[[S2:.*]] = md.reduce_scatter %{{.*}} avg group shard bucket 0 {md.unit = 2 : i64}
// CHECK-NEXT: %[[S1:.*]] = md.reduce_scatter %{{.*}} avg group shard bucket 0 {md.unit = 1 : i64}
// CHECK-NEXT: md.all_reduce %[[S2]] avg group replicate bucket 1 {md.unit = 2 : i64} : tensor<?xf32>
// CHECK-NEXT: md.all_reduce %[[S1]] avg group replicate bucket 1 {md.unit = 1 : i64} : tensor<?xf32>
md.model @hybrid attributes {world_size = 4 : i64, shard_group_size = 2 : i64} {
  md.forward @forward(%x: tensor<36xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<36xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 4 micro_batch 1
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    %x = md.batch : tensor<36xf32>
    %v2 = md.view %x[0] : tensor<36xf32> to tensor<15xf32>
    %g2 = md.flatten %v2 {md.unit = 2 : i64} : tensor<15xf32> to tensor<15xf32>
    %s2 = md.reduce_scatter %g2 avg group shard {md.unit = 2 : i64} : tensor<15xf32> -> tensor<?xf32>
    %r2 = md.all_reduce %s2 avg group replicate {md.unit = 2 : i64} : tensor<?xf32>
    %g1 = md.flatten %x {md.unit = 1 : i64} : tensor<36xf32> to tensor<36xf32>
    %s1 = md.reduce_scatter %g1 avg group shard {md.unit = 1 : i64} : tensor<36xf32> -> tensor<?xf32>
    %r1 = md.all_reduce %s1 avg group replicate {md.unit = 1 : i64} : tensor<?xf32>
  } hooks {
  }
}

// -----

// The body of md.micro_steps is bucketed on its own, and the collectives of
// the hooks get buckets too; ids follow program order.

// CHECK-LABEL: md.model @nested
// CHECK-SAME: {bytes = 102 : i64, {{.*}}, id = 0 : i64, kind = "all_gather", members = ["u1", "u2"]}
// CHECK-SAME: {bytes = 102 : i64, {{.*}}, id = 1 : i64, kind = "all_gather", members = ["u1", "u2"]}
// CHECK-SAME: {bytes = 4 : i64, {{.*}}, id = 2 : i64, kind = "all_reduce", members = ["-"]}
// CHECK: md.micro_steps {
// CHECK: md.all_gather %{{.*}} bucket 0
// CHECK-NEXT: md.all_gather %{{.*}} bucket 0
// CHECK: }
// CHECK: md.all_gather %{{.*}} bucket 1
// CHECK-NEXT: md.all_gather %{{.*}} bucket 1
// CHECK: } hooks {
// CHECK: md.all_reduce %{{.*}} avg group world bucket 2 : tensor<f32>
md.model @nested {
  md.state @u1.master : tensor<?xf32> shard(36) group world role master unit 1
  md.state @u2.master : tensor<?xf32> shard(15) group world role master unit 2
  md.forward @forward(%x: tensor<36xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<36xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 4 micro_batch 1
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    md.micro_steps {
      %b = md.batch : tensor<36xf32>
      %x = md.cast %b : tensor<36xf32> to tensor<36xbf16>
      %m1 = md.state_load @u1.master : tensor<?xf32>
      %c1 = md.cast %m1 : tensor<?xf32> to tensor<?xbf16>
      %p1 = md.all_gather %c1 group world {md.phase = "forward", md.unit = 1 : i64} : tensor<?xbf16> -> tensor<36xbf16>
      %y1 = md.add %x, %p1 : tensor<36xbf16>, tensor<36xbf16> -> tensor<36xbf16>
      %m2 = md.state_load @u2.master : tensor<?xf32>
      %c2 = md.cast %m2 : tensor<?xf32> to tensor<?xbf16>
      %p2 = md.all_gather %c2 group world {md.phase = "forward", md.unit = 2 : i64} : tensor<?xbf16> -> tensor<15xbf16>
    }
    %b = md.batch : tensor<36xf32>
    %x = md.cast %b : tensor<36xf32> to tensor<36xbf16>
    %m1 = md.state_load @u1.master : tensor<?xf32>
    %c1 = md.cast %m1 : tensor<?xf32> to tensor<?xbf16>
    %p1 = md.all_gather %c1 group world {md.phase = "forward", md.unit = 1 : i64} : tensor<?xbf16> -> tensor<36xbf16>
    %y1 = md.add %x, %p1 : tensor<36xbf16>, tensor<36xbf16> -> tensor<36xbf16>
    %m2 = md.state_load @u2.master : tensor<?xf32>
    %c2 = md.cast %m2 : tensor<?xf32> to tensor<?xbf16>
    %p2 = md.all_gather %c2 group world {md.phase = "forward", md.unit = 2 : i64} : tensor<?xbf16> -> tensor<15xbf16>
  } hooks {
    %l = md.loss : tensor<f32>
    %a = md.all_reduce %l avg group world : tensor<f32>
  }
}

// -----

// A collective does not move past an op that holds collectives (here the
// micro-steps' all-reduce): the two reduce-scatters stay in two buckets.

// CHECK-LABEL: md.model @fenced
// CHECK-SAME: members = ["u2"]
// CHECK-SAME: members = ["-"]
// CHECK-SAME: members = ["u1"]
// CHECK: md.reduce_scatter %{{.*}} bucket 0
// CHECK-NEXT: md.micro_steps {
// CHECK-NEXT: md.accum_scale
// CHECK-NEXT: md.all_reduce %{{.*}} bucket 1
// CHECK: md.reduce_scatter %{{.*}} bucket 2
md.model @fenced {
  md.forward @forward(%x: tensor<16xf32>) -> tensor<f32> {
    %l = md.sum %x dims [0] : tensor<16xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
  md.train @forward data #md.data<synthetic, ""> global_batch 4 micro_batch 1
      optimizer #md.sgd<lr = 0.1, momentum = 0.0, dampening = 0.0, weight_decay = 0.0, nesterov = false>
      schedule #md.schedule<constant, warmup = 0, steps = 10, min_lr = 0.0>
      seed 1 step {
    %x = md.batch : tensor<16xf32>
    %g2 = md.flatten %x {md.unit = 2 : i64} : tensor<16xf32> to tensor<16xf32>
    %s2 = md.reduce_scatter %g2 avg group world {md.unit = 2 : i64} : tensor<16xf32> -> tensor<?xf32>
    md.micro_steps {
      %e = md.accum_scale : tensor<f32>
      %r = md.all_reduce %e sum group world : tensor<f32>
    }
    %g1 = md.flatten %x {md.unit = 1 : i64} : tensor<16xf32> to tensor<16xf32>
    %s1 = md.reduce_scatter %g1 avg group world {md.unit = 1 : i64} : tensor<16xf32> -> tensor<?xf32>
  } hooks {
  }
}
