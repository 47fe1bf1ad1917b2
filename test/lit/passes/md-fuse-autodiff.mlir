// RUN: md-opt %s --pass-pipeline='builtin.module(md.model(md-fuse,md-autodiff))' | FileCheck %s

// md-autodiff derives the backward from what md-fuse leaves. The fused
// layer's gradient is md.gelu_grad of `out`'s gradient and `pre`, then
// md.matmul_grad with the layer's flags; the tied head's transpose, folded
// into transpose_b, leaves no transpose in either direction, and the
// table's gradient comes out in its own [V, C] layout, summed with the
// embedding's.
// CHECK-LABEL: md.func @forward.grad
// CHECK-NOT: md.transpose
// CHECK: %[[OUT:.*]], %[[PRE:.*]] = md.matmul_gelu %{{.*}}, %[[W1:.*]] bias %[[B1:.*]] transpose_b approximate {md.unit = 0 : i64} : tensor<4x8x16xf32>, tensor<32x16xf32>, tensor<32xf32> -> tensor<4x8x32xf32>
// CHECK: %[[H:.*]] = md.matmul %[[OUT]], %[[W2:.*]] transpose_b
// CHECK: %[[LOGITS:.*]] = md.matmul %[[H]], %[[WTE:.*]] transpose_b {md.unit = 0 : i64} : tensor<4x8x16xf32>, tensor<64x16xf32> -> tensor<4x8x64xf32>
// CHECK: %[[DH:.*]], %[[DWTE:.*]] = md.matmul_grad %{{.*}}, %[[H]], %[[WTE]] transpose_b {md.backward, md.unit = 0 : i64} : tensor<4x8x64xf32>, tensor<4x8x16xf32>, tensor<64x16xf32> -> tensor<4x8x16xf32>, tensor<64x16xf32>
// CHECK: %[[DOUT:.*]], %{{.*}} = md.matmul_grad %[[DH]], %[[OUT]], %[[W2]] transpose_b
// CHECK: %[[DPRE:.*]] = md.gelu_grad %[[DOUT]], %[[PRE]] approximate {md.backward, md.unit = 0 : i64} : tensor<4x8x32xf32>
// CHECK: md.matmul_grad %[[DPRE]], %{{.*}}, %[[W1]] transpose_b has_bias {md.backward, md.unit = 0 : i64} : tensor<4x8x32xf32>, tensor<4x8x16xf32>, tensor<32x16xf32> -> tensor<4x8x16xf32>, tensor<32x16xf32>, tensor<32xf32>
// CHECK: md.add %[[DWTE]], %{{.*}}
// CHECK-NOT: md.transpose
md.model @tied {
  md.param @wte : tensor<64x16xf32> init <normal(0.0, 0.02)> unit 0
  md.param @fc.weight : tensor<32x16xf32> init <normal(0.0, 0.02)> unit 0
  md.param @fc.bias : tensor<32xf32> init <zeros> unit 0
  md.param @proj.weight : tensor<16x32xf32> init <normal(0.0, 0.02)> unit 0
  md.forward @forward(%idx: tensor<4x8xi32>, %t: tensor<4x8xi32>) -> tensor<f32> {
    %wte = md.param_ref @wte : tensor<64x16xf32>
    %x = md.embedding %wte, %idx : tensor<64x16xf32>, tensor<4x8xi32> -> tensor<4x8x16xf32>
    %w1 = md.param_ref @fc.weight : tensor<32x16xf32>
    %b1 = md.param_ref @fc.bias : tensor<32xf32>
    %h0 = md.matmul %x, %w1 bias %b1 transpose_b : tensor<4x8x16xf32>, tensor<32x16xf32>, tensor<32xf32> -> tensor<4x8x32xf32>
    %g = md.gelu %h0 approximate : tensor<4x8x32xf32>
    %w2 = md.param_ref @proj.weight : tensor<16x32xf32>
    %h = md.matmul %g, %w2 transpose_b : tensor<4x8x32xf32>, tensor<16x32xf32> -> tensor<4x8x16xf32>
    %wte2 = md.param_ref @wte : tensor<64x16xf32>
    %wt = md.transpose %wte2 perm [1, 0] : tensor<64x16xf32> to tensor<16x64xf32>
    %logits = md.matmul %h, %wt : tensor<4x8x16xf32>, tensor<16x64xf32> -> tensor<4x8x64xf32>
    %l = md.cross_entropy %logits, %t : tensor<4x8x64xf32>, tensor<4x8xi32> -> tensor<f32>
    md.return %l : tensor<f32>
  }
}
