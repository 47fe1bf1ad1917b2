// RUN: md-opt %s -split-input-file -verify-diagnostics

func.func @matmul_lhs_rank_too_small(%a: tensor<8xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+1 {{'md.matmul' op lhs must have rank >= 2, got tensor<8xf32>}}
  %0 = md.matmul %a, %b : tensor<8xf32>, tensor<8x16xf32> -> tensor<16xf32>
  return
}

// -----

func.func @matmul_rhs_rank_mismatch(%a: tensor<4x8x16xf32>, %b: tensor<2x4x16x32xf32>) {
  // expected-error @+1 {{rhs must have rank 2 or the rank of lhs (3), got tensor<2x4x16x32xf32>}}
  %0 = md.matmul %a, %b : tensor<4x8x16xf32>, tensor<2x4x16x32xf32> -> tensor<4x8x32xf32>
  return
}

// -----

func.func @matmul_batch_dims_differ(%a: tensor<4x8x16xf32>, %b: tensor<2x16x32xf32>) {
  // expected-error @+1 {{batch dimensions differ: lhs tensor<4x8x16xf32>, rhs tensor<2x16x32xf32>}}
  %0 = md.matmul %a, %b : tensor<4x8x16xf32>, tensor<2x16x32xf32> -> tensor<4x8x32xf32>
  return
}

// -----

func.func @matmul_contracting_dims_differ(%a: tensor<8x768xf32>, %b: tensor<3072x512xf32>) {
  // expected-error @+1 {{contracting dimensions differ: lhs tensor<8x768xf32> has K = 768, rhs tensor<3072x512xf32> has K = 512}}
  %0 = md.matmul %a, %b transpose_b : tensor<8x768xf32>, tensor<3072x512xf32> -> tensor<8x3072xf32>
  return
}

// -----

func.func @matmul_bias_wrong_shape(%a: tensor<8x768xf32>, %b: tensor<3072x768xf32>, %c: tensor<768xf32>) {
  // expected-error @+1 {{bias must be tensor<3072xf32> (N of rhs tensor<3072x768xf32>), got tensor<768xf32>}}
  %0 = md.matmul %a, %b bias %c transpose_b : tensor<8x768xf32>, tensor<3072x768xf32>, tensor<768xf32> -> tensor<8x3072xf32>
  return
}

// -----

func.func @matmul_bias_wrong_element_type(%a: tensor<8x768xf32>, %b: tensor<768x64xf32>, %c: tensor<64xbf16>) {
  // expected-error @+1 {{bias must be tensor<64xf32> (N of rhs tensor<768x64xf32>), got tensor<64xbf16>}}
  %0 = md.matmul %a, %b bias %c : tensor<8x768xf32>, tensor<768x64xf32>, tensor<64xbf16> -> tensor<8x64xf32>
  return
}

// -----

func.func @matmul_result_wrong_shape(%a: tensor<8x768xf32>, %b: tensor<3072x768xf32>) {
  // expected-error @+1 {{result must be tensor<8x3072xf32> (the product of lhs tensor<8x768xf32> and rhs tensor<3072x768xf32>), got tensor<8x768xf32>}}
  %0 = md.matmul %a, %b transpose_b : tensor<8x768xf32>, tensor<3072x768xf32> -> tensor<8x768xf32>
  return
}

// -----

func.func @matmul_element_types_differ(%a: tensor<8x16xbf16>, %b: tensor<16x4xf32>) {
  // expected-error @+1 {{all of {a, b, result} have same element type}}
  %0 = md.matmul %a, %b : tensor<8x16xbf16>, tensor<16x4xf32> -> tensor<8x4xf32>
  return
}

// -----

func.func @add_incompatible_shapes(%a: tensor<8x64x768xf32>, %b: tensor<32x768xf32>) {
  // expected-error @+1 {{'md.add' op incompatible shapes for broadcasting: lhs tensor<8x64x768xf32>, rhs tensor<32x768xf32>}}
  %0 = md.add %a, %b : tensor<8x64x768xf32>, tensor<32x768xf32> -> tensor<8x64x768xf32>
  return
}

// -----

func.func @maximum_incompatible_shapes(%a: tensor<8x64x768xf32>, %b: tensor<32x768xf32>) {
  // expected-error @+1 {{'md.maximum' op incompatible shapes for broadcasting: lhs tensor<8x64x768xf32>, rhs tensor<32x768xf32>}}
  %0 = md.maximum %a, %b : tensor<8x64x768xf32>, tensor<32x768xf32> -> tensor<8x64x768xf32>
  return
}

// -----

func.func @add_result_not_broadcast_shape(%a: tensor<8x64x768xf32>, %b: tensor<64x768xf32>) {
  // expected-error @+1 {{result must be tensor<8x64x768xf32> (the broadcast of lhs tensor<8x64x768xf32> and rhs tensor<64x768xf32>), got tensor<64x768xf32>}}
  %0 = md.add %a, %b : tensor<8x64x768xf32>, tensor<64x768xf32> -> tensor<64x768xf32>
  return
}

// -----

func.func @add_element_types_differ(%a: tensor<8xf32>, %b: tensor<8xbf16>) {
  // expected-error @+1 {{all of {lhs, rhs, result} have same element type}}
  %0 = md.add %a, %b : tensor<8xf32>, tensor<8xbf16> -> tensor<8xf32>
  return
}

// -----

func.func @sub_incompatible_shapes(%a: tensor<4x3xf32>, %b: tensor<4xf32>) {
  // expected-error @+1 {{'md.sub' op incompatible shapes for broadcasting: lhs tensor<4x3xf32>, rhs tensor<4xf32>}}
  %0 = md.sub %a, %b : tensor<4x3xf32>, tensor<4xf32> -> tensor<4x3xf32>
  return
}

// -----

func.func @mul_result_not_broadcast_shape(%a: tensor<4x1xf32>, %b: tensor<3xf32>) {
  // expected-error @+1 {{'md.mul' op result must be tensor<4x3xf32> (the broadcast of lhs tensor<4x1xf32> and rhs tensor<3xf32>), got tensor<4x1xf32>}}
  %0 = md.mul %a, %b : tensor<4x1xf32>, tensor<3xf32> -> tensor<4x1xf32>
  return
}

// -----

func.func @scale_integer_tensor(%x: tensor<4xi32>) {
  // expected-error @+1 {{'md.scale' op operand #0 must be ranked tensor of bfloat16 type or 16-bit float or 32-bit float values}}
  %0 = md.scale %x by 2.0 : tensor<4xi32>
  return
}

// -----

func.func @gelu_integer_tensor(%x: tensor<4xi64>) {
  // expected-error @+1 {{'md.gelu' op operand #0 must be ranked tensor of bfloat16 type or 16-bit float or 32-bit float values}}
  %0 = md.gelu %x : tensor<4xi64>
  return
}

// -----

func.func @relu_result_type_differs(%x: tensor<4xf32>) {
  // expected-error @+1 {{'md.relu' op requires the same type for all operands and results}}
  %0 = "md.relu"(%x) : (tensor<4xf32>) -> tensor<5xf32>
  return
}

// -----

func.func @layer_norm_eps_not_positive(%x: tensor<8x768xf32>, %g: tensor<768xf32>) {
  // expected-error @+1 {{'md.layer_norm' op eps must be > 0, got 0}}
  %0 = md.layer_norm %x, %g eps 0.0 : tensor<8x768xf32>, tensor<768xf32>
  return
}

// -----

func.func @layer_norm_scalar_input(%x: tensor<f32>, %g: tensor<1xf32>) {
  // expected-error @+1 {{'md.layer_norm' op x must have rank >= 1, got tensor<f32>}}
  %0 = md.layer_norm %x, %g : tensor<f32>, tensor<1xf32>
  return
}

// -----

func.func @layer_norm_gamma_wrong_size(%x: tensor<8x768xf32>, %g: tensor<512xf32>) {
  // expected-error @+1 {{gamma must be tensor<768xf32> (the last dim of x tensor<8x768xf32>), got tensor<512xf32>}}
  %0 = md.layer_norm %x, %g : tensor<8x768xf32>, tensor<512xf32>
  return
}

// -----

func.func @layer_norm_beta_wrong_type(%x: tensor<8x768xf32>, %g: tensor<768xf32>, %b: tensor<768xbf16>) {
  // expected-error @+1 {{beta must be tensor<768xf32> (the last dim of x tensor<8x768xf32>), got tensor<768xbf16>}}
  %0 = md.layer_norm %x, %g, %b : tensor<8x768xf32>, tensor<768xf32>, tensor<768xbf16>
  return
}

// -----

func.func @rms_norm_gamma_wrong_size(%x: tensor<8x768xbf16>, %g: tensor<8x768xbf16>) {
  // expected-error @+1 {{'md.rms_norm' op gamma must be tensor<768xbf16> (the last dim of x tensor<8x768xbf16>), got tensor<8x768xbf16>}}
  %0 = md.rms_norm %x, %g : tensor<8x768xbf16>, tensor<8x768xbf16>
  return
}

// -----

func.func @rms_norm_eps_negative(%x: tensor<8x768xf32>, %g: tensor<768xf32>) {
  // expected-error @+1 {{'md.rms_norm' op eps must be > 0, got -1}}
  %0 = md.rms_norm %x, %g eps -1.0 : tensor<8x768xf32>, tensor<768xf32>
  return
}

// -----

func.func @batch_norm_rank_too_small(%x: tensor<32xf32>, %g: tensor<32xf32>) {
  // expected-error @+1 {{'md.batch_norm' op x must have rank >= 2, got tensor<32xf32>}}
  %0:3 = md.batch_norm %x, %g, %g : tensor<32xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<32xf32>, tensor<32xf32>, tensor<32xf32>
  return
}

// -----

func.func @batch_norm_gamma_wrong_size(%x: tensor<8x16x32xf32>, %g: tensor<16xf32>) {
  // expected-error @+1 {{'md.batch_norm' op gamma must be tensor<32xf32> (the last dim of x tensor<8x16x32xf32>), got tensor<16xf32>}}
  %0:3 = md.batch_norm %x, %g, %g : tensor<8x16x32xf32>, tensor<16xf32>, tensor<16xf32> -> tensor<8x16x32xf32>, tensor<32xf32>, tensor<32xf32>
  return
}

// -----

func.func @batch_norm_stats_wrong_size(%x: tensor<8x16x32xbf16>, %g: tensor<32xbf16>) {
  // expected-error @+1 {{'md.batch_norm' op mean must be tensor<32xf32> (the last dim of x tensor<8x16x32xbf16>), got tensor<16xf32>}}
  %0:3 = md.batch_norm %x, %g, %g : tensor<8x16x32xbf16>, tensor<32xbf16>, tensor<32xbf16> -> tensor<8x16x32xbf16>, tensor<16xf32>, tensor<16xf32>
  return
}

// -----

func.func @batch_norm_stats_not_f32(%x: tensor<8x32xbf16>, %g: tensor<32xbf16>) {
  // expected-error @+1 {{'md.batch_norm' op result #1 must be 1D tensor of 32-bit float values}}
  %0:3 = md.batch_norm %x, %g, %g : tensor<8x32xbf16>, tensor<32xbf16>, tensor<32xbf16> -> tensor<8x32xbf16>, tensor<32xbf16>, tensor<32xbf16>
  return
}

// -----

func.func @batch_norm_eps_zero(%x: tensor<8x32xf32>, %g: tensor<32xf32>) {
  // expected-error @+1 {{'md.batch_norm' op eps must be > 0, got 0}}
  %0:3 = md.batch_norm %x, %g, %g eps 0.0 : tensor<8x32xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<8x32xf32>, tensor<32xf32>, tensor<32xf32>
  return
}

// -----

func.func @softmax_axis_out_of_range(%x: tensor<8x10xf32>) {
  // expected-error @+1 {{'md.softmax' op axis 2 is out of range for tensor<8x10xf32> of rank 2}}
  %0 = md.softmax %x axis 2 : tensor<8x10xf32>
  return
}

// -----

func.func @softmax_negative_axis_out_of_range(%x: tensor<8x10xf32>) {
  // expected-error @+1 {{'md.softmax' op axis -3 is out of range for tensor<8x10xf32> of rank 2}}
  %0 = md.softmax %x axis -3 : tensor<8x10xf32>
  return
}

// -----

func.func @causal_attention_heads_do_not_divide(%q: tensor<8x64x768xf32>) {
  // expected-error @+1 {{'md.causal_attention' op C = 768 of tensor<8x64x768xf32> is not divisible by num_heads = 5}}
  %0 = md.causal_attention %q, %q, %q num_heads 5 : tensor<8x64x768xf32>
  return
}

// -----

func.func @causal_attention_not_rank3(%q: tensor<64x768xf32>) {
  // expected-error @+1 {{'md.causal_attention' op operand #0 must be 3D tensor of bfloat16 type or 16-bit float or 32-bit float values, but got 'tensor<64x768xf32>'}}
  %0 = md.causal_attention %q, %q, %q num_heads 12 : tensor<64x768xf32>
  return
}

// -----

func.func @causal_attention_zero_heads(%q: tensor<8x64x768xf32>) {
  // expected-error @+1 {{'md.causal_attention' op attribute 'num_heads' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = md.causal_attention %q, %q, %q num_heads 0 : tensor<8x64x768xf32>
  return
}

// -----

func.func @causal_attention_zero_window(%q: tensor<8x64x768xf32>) {
  // expected-error @+1 {{'md.causal_attention' op attribute 'window' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = md.causal_attention %q, %q, %q num_heads 12 window 0 : tensor<8x64x768xf32>
  return
}

// -----

func.func @embedding_result_wrong_shape(%t: tensor<50304x768xf32>, %ids: tensor<8x64xi32>) {
  // expected-error @+1 {{'md.embedding' op result must be tensor<8x64x768xf32> (ids tensor<8x64xi32> looking up rows of table tensor<50304x768xf32>), got tensor<8x768xf32>}}
  %0 = md.embedding %t, %ids : tensor<50304x768xf32>, tensor<8x64xi32> -> tensor<8x768xf32>
  return
}

// -----

func.func @embedding_float_ids(%t: tensor<10x4xf32>, %ids: tensor<8xf32>) {
  // expected-error @+1 {{'md.embedding' op operand #1 must be ranked tensor of 32-bit signless integer or 64-bit signless integer values}}
  %0 = md.embedding %t, %ids : tensor<10x4xf32>, tensor<8xf32> -> tensor<8x4xf32>
  return
}

// -----

func.func @cross_entropy_targets_wrong_shape(%l: tensor<8x64x100xf32>, %t: tensor<8x32xi32>) {
  // expected-error @+1 {{'md.cross_entropy' op targets must be tensor<8x64xi32> (the leading dims of logits tensor<8x64x100xf32>), got tensor<8x32xi32>}}
  %0 = md.cross_entropy %l, %t : tensor<8x64x100xf32>, tensor<8x32xi32> -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_scalar_logits(%l: tensor<f32>, %t: tensor<i32>) {
  // expected-error @+1 {{'md.cross_entropy' op logits must have rank >= 1, got tensor<f32>}}
  %0 = md.cross_entropy %l, %t : tensor<f32>, tensor<i32> -> tensor<f32>
  return
}

// -----

func.func @cross_entropy_result_not_f32(%l: tensor<8x100xf32>, %t: tensor<8xi32>) {
  // expected-error @+1 {{'md.cross_entropy' op result #0 must be 0D tensor of 32-bit float values}}
  %0 = md.cross_entropy %l, %t : tensor<8x100xf32>, tensor<8xi32> -> tensor<8xf32>
  return
}

// -----

func.func @reshape_element_counts_differ(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'md.reshape' op element counts differ: x tensor<4x8xf32> has 32, result tensor<4x7xf32> has 28}}
  %0 = md.reshape %x : tensor<4x8xf32> to tensor<4x7xf32>
  return
}

// -----

func.func @reshape_element_types_differ(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'md.reshape' op failed to verify that all of {x, result} have same element type}}
  %0 = md.reshape %x : tensor<4x8xf32> to tensor<32xbf16>
  return
}

// -----

func.func @transpose_perm_wrong_size(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'md.transpose' op perm [1, 0, 2] has 3 entries, x tensor<4x8xf32> has rank 2}}
  %0 = md.transpose %x perm [1, 0, 2] : tensor<4x8xf32> to tensor<8x4xf32>
  return
}

// -----

func.func @transpose_perm_not_a_permutation(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'md.transpose' op perm [0, 0] is not a permutation of [0, 2)}}
  %0 = md.transpose %x perm [0, 0] : tensor<4x8xf32> to tensor<4x4xf32>
  return
}

// -----

func.func @transpose_result_not_permuted(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'md.transpose' op result must be tensor<8x4xf32> (x tensor<4x8xf32> permuted by [1, 0]), got tensor<4x8xf32>}}
  %0 = md.transpose %x perm [1, 0] : tensor<4x8xf32> to tensor<4x8xf32>
  return
}

// -----

func.func @arange_empty_range() {
  // expected-error @+1 {{'md.arange' op start 5 must be less than end 5}}
  %0 = md.arange 5 to 5 : tensor<1xi32>
  return
}

// -----

func.func @arange_result_wrong_length() {
  // expected-error @+1 {{'md.arange' op result must be tensor<1024xi32> (end - start = 1024), got tensor<512xi32>}}
  %0 = md.arange 0 to 1024 : tensor<512xi32>
  return
}

// -----

func.func @arange_float_result() {
  // expected-error @+1 {{'md.arange' op result #0 must be 1D tensor of 32-bit signless integer or 64-bit signless integer values}}
  %0 = md.arange 0 to 4 : tensor<4xf32>
  return
}

// -----

func.func @sum_empty_dims(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'md.sum' op dims must not be empty; list every dim to reduce to a scalar}}
  %0 = md.sum %x dims [] : tensor<4x8xf32> to tensor<4x8xf32>
  return
}

// -----

func.func @sum_dim_out_of_range(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'md.sum' op dim 2 is out of range for tensor<4x8xf32> of rank 2}}
  %0 = md.sum %x dims [2] : tensor<4x8xf32> to tensor<4xf32>
  return
}

// -----

func.func @sum_dim_repeated(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'md.sum' op dims [1, -1] list dim 1 twice}}
  %0 = md.sum %x dims [1, -1] : tensor<4x8xf32> to tensor<4xf32>
  return
}

// -----

func.func @sum_result_wrong_shape(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'md.sum' op result must be tensor<8xf32> (x tensor<4x8xf32> reduced over dims [0]), got tensor<4xf32>}}
  %0 = md.sum %x dims [0] : tensor<4x8xf32> to tensor<4xf32>
  return
}

// -----

func.func @mean_keepdim_result_wrong_shape(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'md.mean' op result must be tensor<4x1xf32> (x tensor<4x8xf32> reduced over dims [1] with keepdim), got tensor<4xf32>}}
  %0 = md.mean %x dims [1] keepdim : tensor<4x8xf32> to tensor<4xf32>
  return
}

// -----

func.func @sum_to_does_not_broadcast(%g: tensor<4x16x8xf32>) {
  // expected-error @+1 {{'md.sum_to' op result tensor<3x8xf32> does not broadcast to g tensor<4x16x8xf32>}}
  %0 = md.sum_to %g : tensor<4x16x8xf32> to tensor<3x8xf32>
  return
}

// -----

func.func @sum_to_higher_rank(%g: tensor<16x8xf32>) {
  // expected-error @+1 {{'md.sum_to' op result tensor<1x16x8xf32> does not broadcast to g tensor<16x8xf32>}}
  %0 = md.sum_to %g : tensor<16x8xf32> to tensor<1x16x8xf32>
  return
}

// -----

func.func @accumulate_shapes_differ(%acc: tensor<4x8xf32>, %g: tensor<4x9xbf16>) {
  // expected-error @+1 {{'md.accumulate' op shapes differ: acc tensor<4x8xf32>, g tensor<4x9xbf16>}}
  %0 = md.accumulate %acc, %g : tensor<4x8xf32>, tensor<4x9xbf16>
  return
}

// -----

func.func @matmul_grad_dy_wrong_shape(%dy: tensor<8x768xf32>, %x: tensor<8x768xf32>, %w: tensor<3072x768xf32>) {
  // expected-error @+1 {{'md.matmul_grad' op dy must be tensor<8x3072xf32> (the product of lhs tensor<8x768xf32> and rhs tensor<3072x768xf32>), got tensor<8x768xf32>}}
  %0:2 = md.matmul_grad %dy, %x, %w transpose_b : tensor<8x768xf32>, tensor<8x768xf32>, tensor<3072x768xf32> -> tensor<8x768xf32>, tensor<3072x768xf32>
  return
}

// -----

func.func @matmul_grad_contracting_dims_differ(%dy: tensor<8x64xf32>, %x: tensor<8x768xf32>, %w: tensor<512x64xf32>) {
  // expected-error @+1 {{'md.matmul_grad' op contracting dimensions differ: lhs tensor<8x768xf32> has K = 768, rhs tensor<512x64xf32> has K = 512}}
  %0:2 = md.matmul_grad %dy, %x, %w : tensor<8x64xf32>, tensor<8x768xf32>, tensor<512x64xf32> -> tensor<8x768xf32>, tensor<512x64xf32>
  return
}

// -----

func.func @matmul_grad_has_bias_without_dbias(%dy: tensor<8x64xf32>, %x: tensor<8x768xf32>, %w: tensor<768x64xf32>) {
  // expected-error @+1 {{'md.matmul_grad' op has_bias is set but there is no dbias result}}
  %0:2 = md.matmul_grad %dy, %x, %w has_bias : tensor<8x64xf32>, tensor<8x768xf32>, tensor<768x64xf32> -> tensor<8x768xf32>, tensor<768x64xf32>
  return
}

// -----

func.func @matmul_grad_dbias_without_has_bias(%dy: tensor<8x64xf32>, %x: tensor<8x768xf32>, %w: tensor<768x64xf32>) {
  // expected-error @+1 {{'md.matmul_grad' op has a dbias result but has_bias is not set}}
  %0:3 = md.matmul_grad %dy, %x, %w : tensor<8x64xf32>, tensor<8x768xf32>, tensor<768x64xf32> -> tensor<8x768xf32>, tensor<768x64xf32>, tensor<64xf32>
  return
}

// -----

func.func @matmul_grad_dbias_wrong_shape(%dy: tensor<8x64xf32>, %x: tensor<8x768xf32>, %w: tensor<768x64xf32>) {
  // expected-error @+1 {{'md.matmul_grad' op dbias must be tensor<64xf32> (N of rhs tensor<768x64xf32>), got tensor<768xf32>}}
  %0:3 = md.matmul_grad %dy, %x, %w has_bias : tensor<8x64xf32>, tensor<8x768xf32>, tensor<768x64xf32> -> tensor<8x768xf32>, tensor<768x64xf32>, tensor<768xf32>
  return
}

// -----

func.func @matmul_grad_da_wrong_type(%dy: tensor<8x64xf32>, %x: tensor<8x768xf32>, %w: tensor<768x64xf32>) {
  // expected-error @+1 {{'md.matmul_grad' op failed to verify that all of {a, da} have same type}}
  %0:2 = md.matmul_grad %dy, %x, %w : tensor<8x64xf32>, tensor<8x768xf32>, tensor<768x64xf32> -> tensor<768x8xf32>, tensor<768x64xf32>
  return
}

// -----

func.func @gelu_grad_types_differ(%dy: tensor<4xf32>, %x: tensor<4xbf16>) {
  // expected-error @+1 {{'md.gelu_grad' op requires the same type for all operands and results}}
  %0 = "md.gelu_grad"(%dy, %x) : (tensor<4xf32>, tensor<4xbf16>) -> tensor<4xbf16>
  return
}

// -----

func.func @relu_grad_types_differ(%dy: tensor<4xf32>, %x: tensor<5xf32>) {
  // expected-error @+1 {{'md.relu_grad' op requires the same type for all operands and results}}
  %0 = "md.relu_grad"(%dy, %x) : (tensor<4xf32>, tensor<5xf32>) -> tensor<5xf32>
  return
}

// -----

func.func @silu_of_integers(%x: tensor<4xi32>) {
  // expected-error @+1 {{'md.silu' op operand #0 must be}}
  %0 = md.silu %x : tensor<4xi32>
  return
}

// -----

func.func @silu_grad_types_differ(%dy: tensor<4xf32>, %x: tensor<4xbf16>) {
  // expected-error @+1 {{'md.silu_grad' op requires the same type for all operands and results}}
  %0 = "md.silu_grad"(%dy, %x) : (tensor<4xf32>, tensor<4xbf16>) -> tensor<4xbf16>
  return
}

// -----

func.func @elementwise_of_integers(%x: tensor<4xi32>) {
  // expected-error @+1 {{'md.elementwise' op operand #0 must be}}
  %0 = md.elementwise exp %x : tensor<4xi32>
  return
}

// -----

func.func @elementwise_unknown_function(%x: tensor<4xf32>) {
  // expected-error @+1 {{custom op 'md.elementwise' expected string or keyword containing one of the following enum values for attribute 'fn' [exp, log, sin, cos, tanh, sigmoid, abs, neg, sqrt, rsqrt]}}
  %0 = md.elementwise erf %x : tensor<4xf32>
  return
}

// -----

func.func @pow_of_integers(%x: tensor<4xi32>) {
  // expected-error @+1 {{'md.pow' op operand #0 must be}}
  %0 = md.pow %x by 2.0 : tensor<4xi32>
  return
}

// -----

func.func @elementwise_grad_types_differ(%dy: tensor<4xf32>, %x: tensor<4xbf16>) {
  // expected-error @+1 {{'md.elementwise_grad' op requires the same type for all operands and results}}
  %0 = "md.elementwise_grad"(%dy, %x) {fn = 0 : i32} : (tensor<4xf32>, tensor<4xbf16>) -> tensor<4xbf16>
  return
}

// -----

func.func @layer_norm_grad_has_beta_without_dbeta(%dy: tensor<8x768xf32>, %g: tensor<768xf32>) {
  // expected-error @+1 {{'md.layer_norm_grad' op has_beta is set but there is no dbeta result}}
  %0:2 = md.layer_norm_grad %dy, %dy, %g has_beta : tensor<8x768xf32>, tensor<8x768xf32>, tensor<768xf32> -> tensor<8x768xf32>, tensor<768xf32>
  return
}

// -----

func.func @layer_norm_grad_dbeta_without_has_beta(%dy: tensor<8x768xf32>, %g: tensor<768xf32>) {
  // expected-error @+1 {{'md.layer_norm_grad' op has a dbeta result but has_beta is not set}}
  %0:3 = md.layer_norm_grad %dy, %dy, %g : tensor<8x768xf32>, tensor<8x768xf32>, tensor<768xf32> -> tensor<8x768xf32>, tensor<768xf32>, tensor<768xf32>
  return
}

// -----

func.func @layer_norm_grad_dbeta_wrong_type(%dy: tensor<8x768xf32>, %g: tensor<768xf32>) {
  // expected-error @+1 {{'md.layer_norm_grad' op dbeta must have the type of gamma tensor<768xf32>, got tensor<768xbf16>}}
  %0:3 = md.layer_norm_grad %dy, %dy, %g has_beta : tensor<8x768xf32>, tensor<8x768xf32>, tensor<768xf32> -> tensor<8x768xf32>, tensor<768xf32>, tensor<768xbf16>
  return
}

// -----

func.func @layer_norm_grad_gamma_wrong_size(%dy: tensor<8x768xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{'md.layer_norm_grad' op gamma must be tensor<768xf32> (the last dim of x tensor<8x768xf32>), got tensor<8xf32>}}
  %0:2 = md.layer_norm_grad %dy, %dy, %g : tensor<8x768xf32>, tensor<8x768xf32>, tensor<8xf32> -> tensor<8x768xf32>, tensor<8xf32>
  return
}

// -----

func.func @layer_norm_grad_eps_negative(%dy: tensor<8x768xf32>, %g: tensor<768xf32>) {
  // expected-error @+1 {{'md.layer_norm_grad' op eps must be > 0, got -0.5}}
  %0:2 = md.layer_norm_grad %dy, %dy, %g eps -0.5 : tensor<8x768xf32>, tensor<8x768xf32>, tensor<768xf32> -> tensor<8x768xf32>, tensor<768xf32>
  return
}

// -----

func.func @rms_norm_grad_gamma_wrong_size(%dy: tensor<8x768xf32>, %g: tensor<8xf32>) {
  // expected-error @+1 {{'md.rms_norm_grad' op gamma must be tensor<768xf32> (the last dim of x tensor<8x768xf32>), got tensor<8xf32>}}
  %0:2 = md.rms_norm_grad %dy, %dy, %g : tensor<8x768xf32>, tensor<8x768xf32>, tensor<8xf32> -> tensor<8x768xf32>, tensor<8xf32>
  return
}

// -----

func.func @rms_norm_grad_dx_wrong_type(%dy: tensor<8x768xf32>, %g: tensor<768xf32>) {
  // expected-error @+1 {{'md.rms_norm_grad' op failed to verify that all of {dy, x, dx} have same type}}
  %0:2 = md.rms_norm_grad %dy, %dy, %g : tensor<8x768xf32>, tensor<8x768xf32>, tensor<768xf32> -> tensor<8x768xbf16>, tensor<768xf32>
  return
}

// -----

func.func @batch_norm_grad_stats_wrong_size(%x: tensor<8x32xf32>, %g: tensor<32xf32>, %m: tensor<16xf32>) {
  // expected-error @+1 {{'md.batch_norm_grad' op mean must be tensor<32xf32> (the last dim of x tensor<8x32xf32>), got tensor<16xf32>}}
  %0:3 = md.batch_norm_grad %x, %x, %g, %m, %m : tensor<8x32xf32>, tensor<8x32xf32>, tensor<32xf32>, tensor<16xf32>, tensor<16xf32> -> tensor<8x32xf32>, tensor<32xf32>, tensor<32xf32>
  return
}

// -----

func.func @batch_norm_grad_gamma_wrong_size(%x: tensor<8x32xf32>, %g: tensor<8xf32>, %m: tensor<32xf32>) {
  // expected-error @+1 {{'md.batch_norm_grad' op gamma must be tensor<32xf32> (the last dim of x tensor<8x32xf32>), got tensor<8xf32>}}
  %0:3 = md.batch_norm_grad %x, %x, %g, %m, %m : tensor<8x32xf32>, tensor<8x32xf32>, tensor<8xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<8x32xf32>, tensor<8xf32>, tensor<8xf32>
  return
}

// -----

func.func @batch_norm_grad_rank_too_small(%x: tensor<32xf32>) {
  // expected-error @+1 {{'md.batch_norm_grad' op x must have rank >= 2, got tensor<32xf32>}}
  %0:3 = md.batch_norm_grad %x, %x, %x, %x, %x : tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32>, tensor<32xf32> -> tensor<32xf32>, tensor<32xf32>, tensor<32xf32>
  return
}

// -----

func.func @softmax_grad_axis_out_of_range(%y: tensor<8x10xf32>) {
  // expected-error @+1 {{'md.softmax_grad' op axis 5 is out of range for tensor<8x10xf32> of rank 2}}
  %0 = md.softmax_grad %y, %y axis 5 : tensor<8x10xf32>
  return
}

// -----

func.func @causal_attention_grad_heads_do_not_divide(%q: tensor<2x16x96xf32>) {
  // expected-error @+1 {{'md.causal_attention_grad' op C = 96 of tensor<2x16x96xf32> is not divisible by num_heads = 7}}
  %0:3 = md.causal_attention_grad %q, %q, %q, %q num_heads 7 : tensor<2x16x96xf32>
  return
}

// -----

func.func @embedding_grad_dy_wrong_shape(%dy: tensor<8x32x768xf32>, %ids: tensor<8x64xi32>) {
  // expected-error @+1 {{'md.embedding_grad' op dy tensor<8x32x768xf32> must have the shape of ids tensor<8x64xi32> plus a trailing dim D}}
  %0 = md.embedding_grad %dy, %ids num_embeddings 100 : tensor<8x32x768xf32>, tensor<8x64xi32> -> tensor<100x768xf32>
  return
}

// -----

func.func @embedding_grad_result_wrong_shape(%dy: tensor<8x64x768xf32>, %ids: tensor<8x64xi32>) {
  // expected-error @+1 {{'md.embedding_grad' op result must be tensor<100x768xf32> (num_embeddings = 100 rows of the last dim of dy tensor<8x64x768xf32>), got tensor<768x100xf32>}}
  %0 = md.embedding_grad %dy, %ids num_embeddings 100 : tensor<8x64x768xf32>, tensor<8x64xi32> -> tensor<768x100xf32>
  return
}

// -----

func.func @cross_entropy_grad_targets_wrong_shape(%d: tensor<f32>, %l: tensor<8x100xf32>, %t: tensor<4xi64>) {
  // expected-error @+1 {{'md.cross_entropy_grad' op targets must be tensor<8xi64> (the leading dims of logits tensor<8x100xf32>), got tensor<4xi64>}}
  %0 = md.cross_entropy_grad %d, %l, %t : tensor<f32>, tensor<8x100xf32>, tensor<4xi64>
  return
}

// -----

func.func @cross_entropy_grad_dloss_not_scalar(%d: tensor<1xf32>, %l: tensor<8x100xf32>, %t: tensor<8xi64>) {
  // expected-error @+1 {{'md.cross_entropy_grad' op operand #0 must be 0D tensor of 32-bit float values}}
  %0 = md.cross_entropy_grad %d, %l, %t : tensor<1xf32>, tensor<8x100xf32>, tensor<8xi64>
  return
}

// -----

func.func @sum_grad_dy_wrong_shape(%dy: tensor<64xf32>) {
  // expected-error @+1 {{'md.sum_grad' op dy must be tensor<768xf32> (the result tensor<8x64x768xf32> reduced over dims [0, 1]), got tensor<64xf32>}}
  %0 = md.sum_grad %dy dims [0, 1] : tensor<64xf32> to tensor<8x64x768xf32>
  return
}

// -----

func.func @sum_grad_dim_out_of_range(%dy: tensor<64xf32>) {
  // expected-error @+1 {{'md.sum_grad' op dim -3 is out of range for tensor<4x64xf32> of rank 2}}
  %0 = md.sum_grad %dy dims [-3] : tensor<64xf32> to tensor<4x64xf32>
  return
}

// -----

func.func @mean_grad_dy_wrong_shape(%dy: tensor<8x64xf32>) {
  // expected-error @+1 {{'md.mean_grad' op dy must be tensor<8x64x1xf32> (the result tensor<8x64x768xf32> reduced over dims [2] with keepdim), got tensor<8x64xf32>}}
  %0 = md.mean_grad %dy dims [2] keepdim : tensor<8x64xf32> to tensor<8x64x768xf32>
  return
}

// -----

func.func @rsqrt_negative_eps(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'md.rsqrt' op eps must be >= 0, got -1.000000e+00}}
  %0 = md.rsqrt %x eps -1.0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}

// -----

func.func @sqrt_int(%x: tensor<8xi32>) -> tensor<8xi32> {
  // expected-error @+1 {{'md.sqrt' op operand #0 must be ranked tensor of bfloat16 type or 16-bit float or 32-bit float values, but got 'tensor<8xi32>'}}
  %0 = md.sqrt %x : tensor<8xi32>
  return %0 : tensor<8xi32>
}

// -----

func.func @slice_axis(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'md.slice' op axis 2 is out of range for x tensor<8x64xf32> of rank 2}}
  %0 = md.slice %x axis 2 start 0 step 1 : tensor<8x64xf32> to tensor<8x64xf32>
  return
}

// -----

func.func @slice_past_end(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'md.slice' op 32 elements from 40 by 1 along axis 1 end at 71, past x tensor<8x64xf32>}}
  %0 = md.slice %x axis 1 start 40 step 1 : tensor<8x64xf32> to tensor<8x32xf32>
  return
}

// -----

func.func @slice_step_zero(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'md.slice' op attribute 'step' failed to satisfy constraint: 64-bit signless integer attribute whose value is positive}}
  %0 = md.slice %x axis 1 start 0 step 0 : tensor<8x64xf32> to tensor<8x32xf32>
  return
}

// -----

func.func @slice_other_dim(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'md.slice' op result must be tensor<8x32xf32> (x tensor<8x64xf32> sliced along axis 1), got tensor<4x32xf32>}}
  %0 = md.slice %x axis 1 start 0 step 2 : tensor<8x64xf32> to tensor<4x32xf32>
  return
}

// -----

func.func @slice_element_type(%x: tensor<8x64xf32>) {
  // expected-error @+1 {{'md.slice' op failed to verify that all of {x, result} have same element type}}
  %0 = md.slice %x axis 1 start 0 step 2 : tensor<8x64xf32> to tensor<8x32xbf16>
  return
}

// -----

func.func @slice_grad_shape(%dy: tensor<8x32xf32>) {
  // expected-error @+1 {{'md.slice_grad' op 32 elements from 0 by 3 along axis 1 end at 93, past result tensor<8x64xf32>}}
  %0 = md.slice_grad %dy axis 1 start 0 step 3 : tensor<8x32xf32> to tensor<8x64xf32>
  return
}

// -----

func.func @concat_dims(%a: tensor<8x32xf32>, %b: tensor<4x32xf32>) {
  // expected-error @+1 {{'md.concat' op input 1 tensor<4x32xf32> must have the dims of input 0 tensor<8x32xf32> but at axis 1}}
  %0 = md.concat %a, %b axis 1 : tensor<8x32xf32>, tensor<4x32xf32> to tensor<8x64xf32>
  return
}

// -----

func.func @concat_types(%a: tensor<8x32xf32>, %b: tensor<8x32xbf16>) {
  // expected-error @+1 {{'md.concat' op input 1 tensor<8x32xbf16> must have the element type of input 0 tensor<8x32xf32>}}
  %0 = md.concat %a, %b axis 1 : tensor<8x32xf32>, tensor<8x32xbf16> to tensor<8x64xf32>
  return
}

// -----

func.func @concat_result(%a: tensor<8x32xf32>, %b: tensor<8x16xf32>) {
  // expected-error @+1 {{'md.concat' op result must be tensor<8x48xf32> (the inputs joined along axis 1), got tensor<8x64xf32>}}
  %0 = md.concat %a, %b axis 1 : tensor<8x32xf32>, tensor<8x16xf32> to tensor<8x64xf32>
  return
}

// -----

func.func @concat_axis(%a: tensor<8x32xf32>) {
  // expected-error @+1 {{'md.concat' op axis 2 is out of range for tensor<8x32xf32>}}
  %0 = md.concat %a, %a axis 2 : tensor<8x32xf32>, tensor<8x32xf32> to tensor<8x64xf32>
  return
}

// -----

func.func @expand_shape(%x: tensor<8x2xf32>) {
  // expected-error @+1 {{'md.expand' op x tensor<8x2xf32> does not broadcast to the result tensor<8x4xf32>}}
  %0 = md.expand %x : tensor<8x2xf32> to tensor<8x4xf32>
  return
}

// -----

func.func @clamp_bounds(%x: tensor<8xf32>) -> tensor<8xf32> {
  // expected-error @+1 {{'md.clamp' op min 1.000000e+00 must be at most max -1.000000e+00 (neither NaN)}}
  %0 = md.clamp %x min 1.0 max -1.0 : tensor<8xf32>
  return %0 : tensor<8xf32>
}
