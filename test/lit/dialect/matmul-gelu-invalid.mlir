// RUN: md-opt %s -split-input-file -verify-diagnostics

// md.matmul_gelu checks its operands as md.matmul does.

func.func @matmul_gelu_contracting_dims_differ(%a: tensor<8x768xf32>, %b: tensor<3072x512xf32>) {
  // expected-error @+1 {{'md.matmul_gelu' op contracting dimensions differ: lhs tensor<8x768xf32> has K = 768, rhs tensor<3072x512xf32> has K = 512}}
  %0, %1 = md.matmul_gelu %a, %b transpose_b : tensor<8x768xf32>, tensor<3072x512xf32> -> tensor<8x3072xf32>
  return
}

// -----

func.func @matmul_gelu_bias_wrong_shape(%a: tensor<8x768xf32>, %b: tensor<3072x768xf32>, %c: tensor<768xf32>) {
  // expected-error @+1 {{'md.matmul_gelu' op bias must be tensor<3072xf32> (N of rhs tensor<3072x768xf32>), got tensor<768xf32>}}
  %0, %1 = md.matmul_gelu %a, %b bias %c transpose_b approximate : tensor<8x768xf32>, tensor<3072x768xf32>, tensor<768xf32> -> tensor<8x3072xf32>
  return
}

// -----

func.func @matmul_gelu_out_wrong_shape(%a: tensor<8x768xf32>, %b: tensor<3072x768xf32>) {
  // expected-error @+1 {{'md.matmul_gelu' op out must be tensor<8x3072xf32> (the product of lhs tensor<8x768xf32> and rhs tensor<3072x768xf32>), got tensor<8x768xf32>}}
  %0, %1 = md.matmul_gelu %a, %b transpose_b : tensor<8x768xf32>, tensor<3072x768xf32> -> tensor<8x768xf32>
  return
}

// -----

func.func @matmul_gelu_element_types_differ(%a: tensor<8x768xbf16>, %b: tensor<3072x768xf32>) {
  // expected-error @+1 {{'md.matmul_gelu' op failed to verify that all of {a, b, out} have same element type}}
  %0, %1 = "md.matmul_gelu"(%a, %b) <{transpose_b}> : (tensor<8x768xbf16>, tensor<3072x768xf32>) -> (tensor<8x3072xf32>, tensor<8x3072xf32>)
  return
}

// -----

func.func @matmul_gelu_pre_type_differs(%a: tensor<8x768xf32>, %b: tensor<3072x768xf32>) {
  // expected-error @+1 {{'md.matmul_gelu' op failed to verify that all of {out, pre} have same type}}
  %0, %1 = "md.matmul_gelu"(%a, %b) <{transpose_b}> : (tensor<8x768xf32>, tensor<3072x768xf32>) -> (tensor<8x3072xf32>, tensor<8x3072xbf16>)
  return
}
