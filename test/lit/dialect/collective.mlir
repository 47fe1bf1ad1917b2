// RUN: md-opt %s | md-opt | FileCheck %s
//
// Round trip of every collective and every optional part of its syntax, on a
// 1-D mesh of 4 ranks, a hybrid 2x4 mesh and a mesh symbolic in W.

// CHECK-LABEL: md.model @m attributes {world_size = 4 : i64}
md.model @m attributes {world_size = 4 : i64} {
  // CHECK-LABEL: md.func @all_gather_basic(
  // CHECK: md.all_gather %{{.*}} group shard : tensor<128xbf16> -> tensor<512xbf16>
  md.func @all_gather_basic(%x: tensor<128xbf16>) -> tensor<512xbf16> {
    %0 = md.all_gather %x group shard : tensor<128xbf16> -> tensor<512xbf16>
    md.return %0 : tensor<512xbf16>
  }

  // CHECK-LABEL: md.func @all_gather_bucket(
  // CHECK: md.all_gather %{{.*}} group shard bucket 3 : tensor<128xbf16> -> tensor<512xbf16>
  md.func @all_gather_bucket(%x: tensor<128xbf16>) -> tensor<512xbf16> {
    %0 = md.all_gather %x group shard bucket 3 : tensor<128xbf16> -> tensor<512xbf16>
    md.return %0 : tensor<512xbf16>
  }

  // The default axis 0 is not printed.
  // CHECK-LABEL: md.func @all_gather_axis_default(
  // CHECK: md.all_gather %{{.*}} group world : tensor<8x4xf32> -> tensor<32x4xf32>
  md.func @all_gather_axis_default(%x: tensor<8x4xf32>) -> tensor<32x4xf32> {
    %0 = md.all_gather %x axis 0 group world : tensor<8x4xf32> -> tensor<32x4xf32>
    md.return %0 : tensor<32x4xf32>
  }

  // CHECK-LABEL: md.func @all_gather_axis(
  // CHECK: md.all_gather %{{.*}} axis 1 group world bucket 0 : tensor<64x8xf16> -> tensor<64x32xf16>
  md.func @all_gather_axis(%x: tensor<64x8xf16>) -> tensor<64x32xf16> {
    %0 = md.all_gather %x axis 1 group world bucket 0 : tensor<64x8xf16> -> tensor<64x32xf16>
    md.return %0 : tensor<64x32xf16>
  }

  // On a 1-D mesh the replicate group has one rank.
  // CHECK-LABEL: md.func @all_gather_replicate(
  // CHECK: md.all_gather %{{.*}} group replicate : tensor<16xi32> -> tensor<16xi32>
  md.func @all_gather_replicate(%x: tensor<16xi32>) -> tensor<16xi32> {
    %0 = md.all_gather %x group replicate : tensor<16xi32> -> tensor<16xi32>
    md.return %0 : tensor<16xi32>
  }

  // CHECK-LABEL: md.func @reduce_scatter_basic(
  // CHECK: md.reduce_scatter %{{.*}} sum group shard : tensor<512xf32> -> tensor<128xf32>
  md.func @reduce_scatter_basic(%g: tensor<512xf32>) -> tensor<128xf32> {
    %0 = md.reduce_scatter %g sum group shard : tensor<512xf32> -> tensor<128xf32>
    md.return %0 : tensor<128xf32>
  }

  // CHECK-LABEL: md.func @reduce_scatter_axis_bucket(
  // CHECK: md.reduce_scatter %{{.*}} avg axis 1 group world bucket 7 : tensor<8x64xbf16> -> tensor<8x16xbf16>
  md.func @reduce_scatter_axis_bucket(%g: tensor<8x64xbf16>) -> tensor<8x16xbf16> {
    %0 = md.reduce_scatter %g avg axis 1 group world bucket 7 : tensor<8x64xbf16> -> tensor<8x16xbf16>
    md.return %0 : tensor<8x16xbf16>
  }

  // CHECK-LABEL: md.func @reduce_scatter_reductions(
  // CHECK: md.reduce_scatter %{{.*}} max group world : tensor<8xf32> -> tensor<2xf32>
  // CHECK: md.reduce_scatter %{{.*}} min group world : tensor<8xf32> -> tensor<2xf32>
  // CHECK: md.reduce_scatter %{{.*}} prod group world : tensor<8xf32> -> tensor<2xf32>
  md.func @reduce_scatter_reductions(%g: tensor<8xf32>) -> tensor<2xf32> {
    %0 = md.reduce_scatter %g max group world : tensor<8xf32> -> tensor<2xf32>
    %1 = md.reduce_scatter %g min group world : tensor<8xf32> -> tensor<2xf32>
    %2 = md.reduce_scatter %g prod group world : tensor<8xf32> -> tensor<2xf32>
    md.return %2 : tensor<2xf32>
  }

  // CHECK-LABEL: md.func @all_reduce_scalar(
  // CHECK: md.all_reduce %{{.*}} avg group world : tensor<f32>
  md.func @all_reduce_scalar(%x: tensor<f32>) -> tensor<f32> {
    %0 = md.all_reduce %x avg group world : tensor<f32>
    md.return %0 : tensor<f32>
  }

  // CHECK-LABEL: md.func @all_reduce_reductions(
  // CHECK: md.all_reduce %{{.*}} sum group world bucket 2 : tensor<4096xbf16>
  // CHECK: md.all_reduce %{{.*}} max group shard : tensor<4096xbf16>
  // CHECK: md.all_reduce %{{.*}} min group replicate : tensor<4096xbf16>
  // CHECK: md.all_reduce %{{.*}} prod group world : tensor<4096xbf16>
  md.func @all_reduce_reductions(%x: tensor<4096xbf16>) -> tensor<4096xbf16> {
    %0 = md.all_reduce %x sum group world bucket 2 : tensor<4096xbf16>
    %1 = md.all_reduce %0 max group shard : tensor<4096xbf16>
    %2 = md.all_reduce %1 min group replicate : tensor<4096xbf16>
    %3 = md.all_reduce %2 prod group world : tensor<4096xbf16>
    md.return %3 : tensor<4096xbf16>
  }

  // CHECK-LABEL: md.func @all_reduce_int(
  // CHECK: md.all_reduce %{{.*}} sum group world : tensor<2xi64>
  md.func @all_reduce_int(%x: tensor<2xi64>) -> tensor<2xi64> {
    %0 = md.all_reduce %x sum group world : tensor<2xi64>
    md.return %0 : tensor<2xi64>
  }

  // CHECK-LABEL: md.func @broadcast_basic(
  // CHECK: md.broadcast %{{.*}} root 0 group world : tensor<4xf32>
  md.func @broadcast_basic(%x: tensor<4xf32>) -> tensor<4xf32> {
    %0 = md.broadcast %x root 0 group world : tensor<4xf32>
    md.return %0 : tensor<4xf32>
  }

  // CHECK-LABEL: md.func @broadcast_last_root_bucket(
  // CHECK: md.broadcast %{{.*}} root 3 group shard bucket 1 : tensor<64x32xbf16>
  md.func @broadcast_last_root_bucket(%x: tensor<64x32xbf16>) -> tensor<64x32xbf16> {
    %0 = md.broadcast %x root 3 group shard bucket 1 : tensor<64x32xbf16>
    md.return %0 : tensor<64x32xbf16>
  }

  // CHECK-LABEL: md.func @barrier_basic(
  // CHECK: md.barrier group world{{$}}
  // CHECK: md.barrier group shard bucket 4{{$}}
  // CHECK: md.barrier group replicate{{$}}
  md.func @barrier_basic() {
    md.barrier group world
    md.barrier group shard bucket 4
    md.barrier group replicate
    md.return
  }

  // Other discardable attributes survive.
  // CHECK-LABEL: md.func @discardable_attr(
  // CHECK: md.all_reduce %{{.*}} sum group world {note = "loss"} : tensor<f32>
  md.func @discardable_attr(%x: tensor<f32>) -> tensor<f32> {
    %0 = md.all_reduce %x sum group world {note = "loss"} : tensor<f32>
    md.return %0 : tensor<f32>
  }

  // A flat shard with W pinned: N = 4161 need not divide by 4.
  // CHECK-LABEL: md.func @pinned_flat_shards(
  // CHECK: md.all_gather %{{.*}} group world : tensor<?xf32> -> tensor<4161xf32>
  // CHECK: md.reduce_scatter %{{.*}} sum group world : tensor<4161xf32> -> tensor<?xf32>
  md.func @pinned_flat_shards(%s: tensor<?xf32>) -> tensor<?xf32> {
    %0 = md.all_gather %s group world : tensor<?xf32> -> tensor<4161xf32>
    %1 = md.reduce_scatter %0 sum group world : tensor<4161xf32> -> tensor<?xf32>
    md.return %1 : tensor<?xf32>
  }
}

// A hybrid mesh: shard groups of 2 ranks, replicate groups of 4.
// CHECK-LABEL: md.model @hybrid
md.model @hybrid attributes {world_size = 8 : i64, shard_group_size = 2 : i64} {
  // CHECK-LABEL: md.func @hybrid_all_gather(
  // CHECK: md.all_gather %{{.*}} group shard : tensor<128xbf16> -> tensor<256xbf16>
  // CHECK: md.all_gather %{{.*}} group replicate : tensor<128xbf16> -> tensor<512xbf16>
  // CHECK: md.all_gather %{{.*}} group world : tensor<128xbf16> -> tensor<1024xbf16>
  md.func @hybrid_all_gather(%x: tensor<128xbf16>) -> tensor<256xbf16> {
    %0 = md.all_gather %x group shard : tensor<128xbf16> -> tensor<256xbf16>
    %1 = md.all_gather %x group replicate : tensor<128xbf16> -> tensor<512xbf16>
    %2 = md.all_gather %x group world : tensor<128xbf16> -> tensor<1024xbf16>
    md.return %0 : tensor<256xbf16>
  }

  // CHECK-LABEL: md.func @hybrid_reduce_scatter(
  // CHECK: md.reduce_scatter %{{.*}} avg group shard : tensor<256xf32> -> tensor<128xf32>
  // CHECK: md.reduce_scatter %{{.*}} sum axis 1 group replicate : tensor<2x8xf32> -> tensor<2x2xf32>
  md.func @hybrid_reduce_scatter(%g: tensor<256xf32>, %h: tensor<2x8xf32>) -> tensor<128xf32> {
    %0 = md.reduce_scatter %g avg group shard : tensor<256xf32> -> tensor<128xf32>
    %1 = md.reduce_scatter %h sum axis 1 group replicate : tensor<2x8xf32> -> tensor<2x2xf32>
    md.return %0 : tensor<128xf32>
  }

  // CHECK-LABEL: md.func @hybrid_all_reduce_broadcast_barrier(
  // CHECK: md.all_reduce %{{.*}} avg group replicate bucket 0 : tensor<128xf32>
  // CHECK: md.broadcast %{{.*}} root 3 group replicate : tensor<128xf32>
  // CHECK: md.broadcast %{{.*}} root 1 group shard : tensor<128xf32>
  // CHECK: md.barrier group replicate
  md.func @hybrid_all_reduce_broadcast_barrier(%x: tensor<128xf32>) -> tensor<128xf32> {
    %0 = md.all_reduce %x avg group replicate bucket 0 : tensor<128xf32>
    %1 = md.broadcast %0 root 3 group replicate : tensor<128xf32>
    %2 = md.broadcast %1 root 1 group shard : tensor<128xf32>
    md.barrier group replicate
    md.return %2 : tensor<128xf32>
  }
}

// W is symbolic: the gathered side may be dynamic, a static one must be a
// multiple of the shard.
// CHECK-LABEL: md.model @symbolic
md.model @symbolic {
  // CHECK-LABEL: md.func @symbolic_all_gather(
  // CHECK: md.all_gather %{{.*}} group world : tensor<16xf32> -> tensor<?xf32>
  // CHECK: md.all_gather %{{.*}} axis 1 group shard : tensor<2x16xf32> -> tensor<2x?xf32>
  // CHECK: md.all_gather %{{.*}} group world : tensor<16xf32> -> tensor<64xf32>
  md.func @symbolic_all_gather(%x: tensor<16xf32>, %y: tensor<2x16xf32>) -> tensor<?xf32> {
    %0 = md.all_gather %x group world : tensor<16xf32> -> tensor<?xf32>
    %1 = md.all_gather %y axis 1 group shard : tensor<2x16xf32> -> tensor<2x?xf32>
    %2 = md.all_gather %x group world : tensor<16xf32> -> tensor<64xf32>
    md.return %0 : tensor<?xf32>
  }

  // The 1-D shard of a static flat buffer (a sharded md.state): ceil(N / n)
  // elements, whether or not n is known; N need not divide by n.
  // CHECK-LABEL: md.func @flat_shards(
  // CHECK: md.all_gather %{{.*}} group world : tensor<?xbf16> -> tensor<4161xbf16>
  // CHECK: md.reduce_scatter %{{.*}} avg group shard bucket 2 : tensor<4161xf32> -> tensor<?xf32>
  md.func @flat_shards(%s: tensor<?xbf16>, %g: tensor<4161xf32>) -> tensor<?xf32> {
    %0 = md.all_gather %s group world : tensor<?xbf16> -> tensor<4161xbf16>
    %1 = md.reduce_scatter %g avg group shard bucket 2 : tensor<4161xf32> -> tensor<?xf32>
    md.return %1 : tensor<?xf32>
  }

  // CHECK-LABEL: md.func @symbolic_reduce_scatter(
  // CHECK: md.reduce_scatter %{{.*}} sum group world : tensor<?x8xf32> -> tensor<4x8xf32>
  // CHECK: md.reduce_scatter %{{.*}} avg group shard bucket 5 : tensor<48xf32> -> tensor<12xf32>
  md.func @symbolic_reduce_scatter(%g: tensor<?x8xf32>, %h: tensor<48xf32>) -> tensor<4x8xf32> {
    %0 = md.reduce_scatter %g sum group world : tensor<?x8xf32> -> tensor<4x8xf32>
    %1 = md.reduce_scatter %h avg group shard bucket 5 : tensor<48xf32> -> tensor<12xf32>
    md.return %0 : tensor<4x8xf32>
  }

  // Any root is possible until W is known.
  // CHECK-LABEL: md.func @symbolic_all_reduce_broadcast_barrier(
  // CHECK: md.all_reduce %{{.*}} sum group world : tensor<f32>
  // CHECK: md.broadcast %{{.*}} root 7 group world : tensor<f32>
  // CHECK: md.barrier group shard
  md.func @symbolic_all_reduce_broadcast_barrier(%x: tensor<f32>) -> tensor<f32> {
    %0 = md.all_reduce %x sum group world : tensor<f32>
    %1 = md.broadcast %0 root 7 group world : tensor<f32>
    md.barrier group shard
    md.return %1 : tensor<f32>
  }
}
