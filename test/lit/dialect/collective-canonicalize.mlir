// RUN: md-opt %s -canonicalize | FileCheck %s
// RUN: md-opt %s -cse | FileCheck %s --check-prefix=CSE
//
// A collective over a group of statically one rank, and an all_reduce or
// broadcast of a zero-element tensor, is replaced by its operand (a barrier is
// erased). Both facts are the same on every rank (the mesh is pinned in
// md.model, shapes are rank-independent in SPMD), so all ranks drop it
// together. Nothing else is touched, not even a collective whose result is
// unused: it reads and writes md.comm.

// One-rank groups: a world of 1, and the replicate group of a 1-D mesh.
md.model @single attributes {world_size = 1 : i64} {
  // CHECK-LABEL: md.func @all_gather_one_rank(
  // CHECK-SAME: %[[X:.*]]: tensor<8xbf16>
  // CHECK-NOT: md.all_gather
  // CHECK: md.return %[[X]] : tensor<8xbf16>
  md.func @all_gather_one_rank(%x: tensor<8xbf16>) -> tensor<8xbf16> {
    %0 = md.all_gather %x group world bucket 1 : tensor<8xbf16> -> tensor<8xbf16>
    md.return %0 : tensor<8xbf16>
  }

  // CHECK-LABEL: md.func @reduce_scatter_one_rank(
  // CHECK-SAME: %[[X:.*]]: tensor<8x4xf32>
  // CHECK-NOT: md.reduce_scatter
  // CHECK: md.return %[[X]] : tensor<8x4xf32>
  md.func @reduce_scatter_one_rank(%x: tensor<8x4xf32>) -> tensor<8x4xf32> {
    %0 = md.reduce_scatter %x avg axis 1 group shard : tensor<8x4xf32> -> tensor<8x4xf32>
    md.return %0 : tensor<8x4xf32>
  }

  // CHECK-LABEL: md.func @broadcast_one_rank(
  // CHECK-SAME: %[[X:.*]]: tensor<4xf32>
  // CHECK-NOT: md.broadcast
  // CHECK: md.return %[[X]] : tensor<4xf32>
  md.func @broadcast_one_rank(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = md.broadcast %x root 0 group world : tensor<4xf32>
    md.return %0 : tensor<4xf32>
  }

  // CHECK-LABEL: md.func @barrier_one_rank(
  // CHECK-NOT: md.barrier
  // CHECK: md.return
  md.func @barrier_one_rank() {
    md.barrier group world
    md.return
  }
}

md.model @m attributes {world_size = 4 : i64} {
  // CHECK-LABEL: md.func @all_reduce_replicate_one_rank(
  // CHECK-SAME: %[[X:.*]]: tensor<16xf32>
  // CHECK-NOT: md.all_reduce
  // CHECK: md.return %[[X]] : tensor<16xf32>
  md.func @all_reduce_replicate_one_rank(%x: tensor<16xf32>) -> tensor<16xf32> {
    %0 = md.all_reduce %x sum group replicate : tensor<16xf32>
    md.return %0 : tensor<16xf32>
  }

  // CHECK-LABEL: md.func @barrier_replicate_one_rank(
  // CHECK-NOT: md.barrier
  // CHECK: md.return
  md.func @barrier_replicate_one_rank() {
    md.barrier group replicate
    md.return
  }

  // Zero elements: nothing to reduce or send.
  // CHECK-LABEL: md.func @all_reduce_empty(
  // CHECK-SAME: %[[X:.*]]: tensor<0x4xf32>
  // CHECK-NOT: md.all_reduce
  // CHECK: md.return %[[X]] : tensor<0x4xf32>
  md.func @all_reduce_empty(%x: tensor<0x4xf32>) -> tensor<0x4xf32> {
    %0 = md.all_reduce %x sum group world : tensor<0x4xf32>
    md.return %0 : tensor<0x4xf32>
  }

  // CHECK-LABEL: md.func @broadcast_empty(
  // CHECK-SAME: %[[X:.*]]: tensor<0xbf16>
  // CHECK-NOT: md.broadcast
  // CHECK: md.return %[[X]] : tensor<0xbf16>
  md.func @broadcast_empty(%x: tensor<0xbf16>) -> tensor<0xbf16> {
    %0 = md.broadcast %x root 3 group world : tensor<0xbf16>
    md.return %0 : tensor<0xbf16>
  }

  // n = 4: everything stays, including an unused result.
  // CHECK-LABEL: md.func @world_kept(
  // CHECK: md.all_gather %{{.*}} group world : tensor<4xf32> -> tensor<16xf32>
  // CHECK: md.reduce_scatter %{{.*}} sum group world : tensor<16xf32> -> tensor<4xf32>
  // CHECK: md.all_reduce %{{.*}} avg group world : tensor<4xf32>
  // CHECK: md.all_reduce %{{.*}} max group shard : tensor<4xf32>
  // CHECK: md.broadcast %{{.*}} root 0 group world : tensor<4xf32>
  // CHECK: md.barrier group world
  // CHECK: md.barrier group shard
  md.func @world_kept(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = md.all_gather %x group world : tensor<4xf32> -> tensor<16xf32>
    %1 = md.reduce_scatter %0 sum group world : tensor<16xf32> -> tensor<4xf32>
    %2 = md.all_reduce %1 avg group world : tensor<4xf32>
    %unused = md.all_reduce %2 max group shard : tensor<4xf32>
    %3 = md.broadcast %2 root 0 group world : tensor<4xf32>
    md.barrier group world
    md.barrier group shard
    md.return %3 : tensor<4xf32>
  }

  // Zero elements only fold all_reduce and broadcast.
  // CHECK-LABEL: md.func @all_gather_empty_kept(
  // CHECK: md.all_gather %{{.*}} group world : tensor<0xf32> -> tensor<0xf32>
  md.func @all_gather_empty_kept(%x: tensor<0xf32>) -> tensor<0xf32> {
    %0 = md.all_gather %x group world : tensor<0xf32> -> tensor<0xf32>
    md.return %0 : tensor<0xf32>
  }

  // Identical collectives are not merged, by -cse either.
  // CHECK-LABEL: md.func @identical_kept(
  // CHECK-COUNT-2: md.all_reduce %{{.*}} sum group world : tensor<4xf32>
  // CHECK-COUNT-2: md.barrier group world
  // CSE-LABEL: md.func @identical_kept(
  // CSE-COUNT-2: md.all_reduce %{{.*}} sum group world : tensor<4xf32>
  // CSE-COUNT-2: md.barrier group world
  md.func @identical_kept(%x: tensor<4xf32>) -> (tensor<4xf32>, tensor<4xf32>) {
    %0 = md.all_reduce %x sum group world : tensor<4xf32>
    %1 = md.all_reduce %x sum group world : tensor<4xf32>
    md.barrier group world
    md.barrier group world
    md.return %0, %1 : tensor<4xf32>, tensor<4xf32>
  }
}

// Hybrid mesh: shard n = 2, replicate n = 4; nothing folds.
md.model @hybrid attributes {world_size = 8 : i64, shard_group_size = 2 : i64} {
  // CHECK-LABEL: md.func @hybrid_kept(
  // CHECK: md.all_gather %{{.*}} group shard : tensor<4xf32> -> tensor<8xf32>
  // CHECK: md.all_reduce %{{.*}} sum group replicate : tensor<8xf32>
  // CHECK: md.barrier group replicate
  md.func @hybrid_kept(%x: tensor<4xf32>) -> tensor<8xf32> {
    %0 = md.all_gather %x group shard : tensor<4xf32> -> tensor<8xf32>
    %1 = md.all_reduce %0 sum group replicate : tensor<8xf32>
    md.barrier group replicate
    md.return %1 : tensor<8xf32>
  }
}

// Hybrid mesh with one replica: the replicate group has one rank.
md.model @one_replica attributes {world_size = 4 : i64, shard_group_size = 4 : i64} {
  // CHECK-LABEL: md.func @one_replica_all_reduce(
  // CHECK-SAME: %[[X:.*]]: tensor<8xf32>
  // CHECK-NOT: md.all_reduce
  // CHECK: md.return %[[X]] : tensor<8xf32>
  md.func @one_replica_all_reduce(%x: tensor<8xf32>) -> tensor<8xf32> {
    %0 = md.all_reduce %x avg group replicate : tensor<8xf32>
    md.return %0 : tensor<8xf32>
  }
}

// Symbolic W: world and shard sizes are unknown, so those collectives stay;
// the replicate group of a 1-D mesh has one rank whatever W is.
md.model @symbolic {
  // CHECK-LABEL: md.func @symbolic_kept(
  // CHECK: md.all_gather %{{.*}} group world : tensor<4xf32> -> tensor<?xf32>
  // CHECK: md.reduce_scatter %{{.*}} sum group shard : tensor<16xf32> -> tensor<4xf32>
  // CHECK: md.all_reduce %{{.*}} sum group world : tensor<4xf32>
  // CHECK: md.broadcast %{{.*}} root 0 group shard : tensor<4xf32>
  // CHECK: md.barrier group world
  md.func @symbolic_kept(%x: tensor<4xf32>, %g: tensor<16xf32>) -> tensor<?xf32> {
    %0 = md.all_gather %x group world : tensor<4xf32> -> tensor<?xf32>
    %1 = md.reduce_scatter %g sum group shard : tensor<16xf32> -> tensor<4xf32>
    %2 = md.all_reduce %1 sum group world : tensor<4xf32>
    %3 = md.broadcast %2 root 0 group shard : tensor<4xf32>
    md.barrier group world
    md.return %0 : tensor<?xf32>
  }

  // CHECK-LABEL: md.func @symbolic_replicate_one_rank(
  // CHECK-SAME: %[[X:.*]]: tensor<4xf32>
  // CHECK-NOT: md.all_reduce
  // CHECK-NOT: md.barrier
  // CHECK: md.return %[[X]] : tensor<4xf32>
  md.func @symbolic_replicate_one_rank(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = md.all_reduce %x sum group replicate : tensor<4xf32>
    md.barrier group replicate
    md.return %0 : tensor<4xf32>
  }

  // CHECK-LABEL: md.func @symbolic_empty(
  // CHECK-SAME: %[[X:.*]]: tensor<0xf32>
  // CHECK-NOT: md.all_reduce
  // CHECK: md.return %[[X]] : tensor<0xf32>
  md.func @symbolic_empty(%x: tensor<0xf32>) -> tensor<0xf32> {
    %0 = md.all_reduce %x sum group world : tensor<0xf32>
    md.return %0 : tensor<0xf32>
  }
}
