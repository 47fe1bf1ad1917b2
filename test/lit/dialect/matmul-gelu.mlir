// RUN: md-opt %s | md-opt | FileCheck %s

// Round trip of md.matmul_gelu in each of its optional forms.

// CHECK-LABEL: func.func @matmul_gelu
func.func @matmul_gelu(%x: tensor<8x768xf32>, %w: tensor<3072x768xf32>, %b: tensor<3072xf32>,
                       %xt: tensor<768x8xbf16>, %wt: tensor<768x3072xbf16>,
                       %q: tensor<4x64x32xf16>, %k: tensor<4x64x32xf16>) {
  // CHECK: %{{.*}}, %{{.*}} = md.matmul_gelu %{{.*}}, %{{.*}} bias %{{.*}} transpose_b approximate : tensor<8x768xf32>, tensor<3072x768xf32>, tensor<3072xf32> -> tensor<8x3072xf32>
  %0, %1 = md.matmul_gelu %x, %w bias %b transpose_b approximate : tensor<8x768xf32>, tensor<3072x768xf32>, tensor<3072xf32> -> tensor<8x3072xf32>
  // CHECK: %{{.*}}, %{{.*}} = md.matmul_gelu %{{.*}}, %{{.*}} transpose_a : tensor<768x8xbf16>, tensor<768x3072xbf16> -> tensor<8x3072xbf16>
  %2, %3 = md.matmul_gelu %xt, %wt transpose_a : tensor<768x8xbf16>, tensor<768x3072xbf16> -> tensor<8x3072xbf16>
  // CHECK: %{{.*}}, %{{.*}} = md.matmul_gelu %{{.*}}, %{{.*}} transpose_b : tensor<4x64x32xf16>, tensor<4x64x32xf16> -> tensor<4x64x64xf16>
  %4, %5 = md.matmul_gelu %q, %k transpose_b : tensor<4x64x32xf16>, tensor<4x64x32xf16> -> tensor<4x64x64xf16>
  return
}
