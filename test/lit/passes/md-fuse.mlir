// RUN: md-opt %s -split-input-file --pass-pipeline='builtin.module(md.model(md-fuse))' | FileCheck %s

// Weight tying's output head: the transpose of a shared [V, C] table
// becomes transpose_b, and the transpose is gone.
// CHECK-LABEL: md.model @tied_head
// CHECK: %[[W:.*]] = md.param_ref @wte.weight
// CHECK-NOT: md.transpose
// CHECK: md.matmul %{{.*}}, %[[W]] transpose_b : tensor<2x4x8xf32>, tensor<16x8xf32> -> tensor<2x4x16xf32>
md.model @tied_head {
  md.param @wte.weight : tensor<16x8xf32> init <normal(0.0, 0.02)> unit 0
  md.forward @forward(%x: tensor<2x4x8xf32>) -> tensor<f32> {
    %w = md.param_ref @wte.weight : tensor<16x8xf32>
    %t = md.transpose %w perm [1, 0] : tensor<16x8xf32> to tensor<8x16xf32>
    %y = md.matmul %x, %t : tensor<2x4x8xf32>, tensor<8x16xf32> -> tensor<2x4x16xf32>
    %l = md.sum %y dims [0, 1, 2] : tensor<2x4x16xf32> to tensor<f32>
    md.return %l : tensor<f32>
  }
}

// -----

// Every function is fused, not only the forward (md.call's callees: the
// blocks). A transposed a sets transpose_a; a transposed b that already had
// transpose_b clears it. A batched operand swapped in its last two dims
// folds too, and one transpose read by two matmuls folds into both.
// CHECK-LABEL: md.model @flags
// CHECK: md.func @f(%[[X:.*]]: tensor<4x8xf32>, %[[U:.*]]: tensor<4x16xf32>, %[[W:.*]]: tensor<8x16xf32>, %[[Q:.*]]: tensor<2x4x8xf32>, %[[K:.*]]: tensor<2x4x8xf32>)
// CHECK-NOT: md.transpose
// CHECK: md.matmul %[[X]], %[[U]] transpose_a : tensor<4x8xf32>, tensor<4x16xf32> -> tensor<8x16xf32>
// CHECK: md.matmul %[[X]], %[[W]] : tensor<4x8xf32>, tensor<8x16xf32> -> tensor<4x16xf32>
// CHECK: md.matmul %[[Q]], %[[K]] transpose_b : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x4x4xf32>
// CHECK: md.matmul %[[K]], %[[K]] transpose_a : tensor<2x4x8xf32>, tensor<2x4x8xf32> -> tensor<2x8x8xf32>
md.model @flags {
  md.func @f(%x: tensor<4x8xf32>, %u: tensor<4x16xf32>, %w: tensor<8x16xf32>, %q: tensor<2x4x8xf32>, %k: tensor<2x4x8xf32>) -> (tensor<8x16xf32>, tensor<4x16xf32>, tensor<2x4x4xf32>, tensor<2x8x8xf32>) {
    %xt = md.transpose %x perm [1, 0] : tensor<4x8xf32> to tensor<8x4xf32>
    %a = md.matmul %xt, %u : tensor<8x4xf32>, tensor<4x16xf32> -> tensor<8x16xf32>
    %wt = md.transpose %w perm [1, 0] : tensor<8x16xf32> to tensor<16x8xf32>
    %b = md.matmul %x, %wt transpose_b : tensor<4x8xf32>, tensor<16x8xf32> -> tensor<4x16xf32>
    %kt = md.transpose %k perm [0, 2, 1] : tensor<2x4x8xf32> to tensor<2x8x4xf32>
    %s = md.matmul %q, %kt : tensor<2x4x8xf32>, tensor<2x8x4xf32> -> tensor<2x4x4xf32>
    %g = md.matmul %kt, %k : tensor<2x8x4xf32>, tensor<2x4x8xf32> -> tensor<2x8x8xf32>
    md.return %a, %b, %s, %g : tensor<8x16xf32>, tensor<4x16xf32>, tensor<2x4x4xf32>, tensor<2x8x8xf32>
  }
}

// -----

// What stays: a transpose that another op still reads (folding the matmul
// alone would save nothing: the copy is still made), and a permutation
// that moves a batch dim, which no GEMM layout can read in place.
// CHECK-LABEL: md.model @kept
// CHECK: %[[T:.*]] = md.transpose %{{.*}} perm [1, 0] : tensor<8x16xf32> to tensor<16x8xf32>
// CHECK: md.matmul %{{.*}}, %[[T]] : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
// CHECK: md.sum %[[T]]
// CHECK: %[[B:.*]] = md.transpose %{{.*}} perm [1, 0, 2] : tensor<4x2x8xf32> to tensor<2x4x8xf32>
// CHECK: md.matmul %{{.*}}, %[[B]] : tensor<2x3x4xf32>, tensor<2x4x8xf32> -> tensor<2x3x8xf32>
md.model @kept {
  md.func @f(%x: tensor<4x16xf32>, %w: tensor<8x16xf32>, %p: tensor<2x3x4xf32>, %v: tensor<4x2x8xf32>) -> (tensor<4x8xf32>, tensor<f32>, tensor<2x3x8xf32>) {
    %t = md.transpose %w perm [1, 0] : tensor<8x16xf32> to tensor<16x8xf32>
    %y = md.matmul %x, %t : tensor<4x16xf32>, tensor<16x8xf32> -> tensor<4x8xf32>
    %s = md.sum %t dims [0, 1] : tensor<16x8xf32> to tensor<f32>
    %b = md.transpose %v perm [1, 0, 2] : tensor<4x2x8xf32> to tensor<2x4x8xf32>
    %o = md.matmul %p, %b : tensor<2x3x4xf32>, tensor<2x4x8xf32> -> tensor<2x3x8xf32>
    md.return %y, %s, %o : tensor<4x8xf32>, tensor<f32>, tensor<2x3x8xf32>
  }
}

// -----

// The MLP's first layer: a matmul read only by a GELU becomes one
// md.matmul_gelu whose `out` replaces the GELU's result. A matmul another
// op also reads stays unfused, and so does a GELU of something else.
// CHECK-LABEL: md.model @mlp
// CHECK: %[[OUT:.*]], %{{.*}} = md.matmul_gelu %{{.*}}, %{{.*}} bias %{{.*}} transpose_b approximate : tensor<8x16xf32>, tensor<32x16xf32>, tensor<32xf32> -> tensor<8x32xf32>
// CHECK-NEXT: %[[Y:.*]] = md.matmul %[[OUT]], %{{.*}} transpose_b : tensor<8x32xf32>, tensor<16x32xf32> -> tensor<8x16xf32>
// CHECK-NEXT: %[[K:.*]] = md.matmul %[[Y]], %{{.*}} : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32>
// CHECK-NEXT: md.gelu %[[K]] : tensor<8x16xf32>
// CHECK-NEXT: md.add %[[K]]
// CHECK-NEXT: md.gelu %{{.*}} : tensor<8x16xf32>
// CHECK-NOT: md.matmul_gelu
md.model @mlp {
  md.func @f(%x: tensor<8x16xf32>, %w1: tensor<32x16xf32>, %b1: tensor<32xf32>, %w2: tensor<16x32xf32>, %s: tensor<16x16xf32>) -> (tensor<8x16xf32>, tensor<8x16xf32>) {
    %h = md.matmul %x, %w1 bias %b1 transpose_b : tensor<8x16xf32>, tensor<32x16xf32>, tensor<32xf32> -> tensor<8x32xf32>
    %g = md.gelu %h approximate : tensor<8x32xf32>
    %y = md.matmul %g, %w2 transpose_b : tensor<8x32xf32>, tensor<16x32xf32> -> tensor<8x16xf32>
    %k = md.matmul %y, %s : tensor<8x16xf32>, tensor<16x16xf32> -> tensor<8x16xf32>
    %kg = md.gelu %k : tensor<8x16xf32>
    %sum = md.add %k, %kg : tensor<8x16xf32>, tensor<8x16xf32> -> tensor<8x16xf32>
    %xg = md.gelu %sum : tensor<8x16xf32>
    md.return %xg, %y : tensor<8x16xf32>, tensor<8x16xf32>
  }
}
