// RUN: md-opt %s -split-input-file -verify-diagnostics

func.func @cast_shape(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'md.cast' op must keep the shape, got 'tensor<4x8xf32>' to 'tensor<8x4xbf16>'}}
  %0 = md.cast %x : tensor<4x8xf32> to tensor<8x4xbf16>
  return
}

// -----

func.func @cast_int_result(%x: tensor<4xf32>) {
  // expected-error @+1 {{'md.cast' op element types must be bf16, f16 or f32, or i32 or i64 to a float, got 'f32' to 'i32'}}
  %0 = md.cast %x : tensor<4xf32> to tensor<4xi32>
  return
}

// -----

func.func @cast_f64_input(%x: tensor<4xf64>) {
  // expected-error @+1 {{'md.cast' op element types must be bf16, f16 or f32, or i32 or i64 to a float, got 'f64' to 'f32'}}
  %0 = md.cast %x : tensor<4xf64> to tensor<4xf32>
  return
}

// -----

func.func @flatten_no_operands() {
  // expected-error @+1 {{'md.flatten' op needs at least one operand}}
  %0 = "md.flatten"() : () -> tensor<8xf32>
  return
}

// -----

func.func @flatten_result_not_1d(%a: tensor<4x8xf32>) {
  // expected-error @+1 {{'md.flatten' op result must be a static 1-D tensor, got 'tensor<4x8xf32>'}}
  %0 = md.flatten %a : tensor<4x8xf32> to tensor<4x8xf32>
  return
}

// -----

func.func @flatten_dynamic_operand(%a: tensor<?x8xf32>) {
  // expected-error @+1 {{'md.flatten' op operand #0 must have a static shape, got 'tensor<?x8xf32>'}}
  %0 = md.flatten %a : tensor<?x8xf32> to tensor<64xf32>
  return
}

// -----

func.func @flatten_element_type(%a: tensor<4xf32>, %b: tensor<4xbf16>) {
  // expected-error @+1 {{'md.flatten' op operand #1 has element type 'bf16', the result 'f32'}}
  %0 = md.flatten %a, %b : tensor<4xf32>, tensor<4xbf16> to tensor<8xf32>
  return
}

// -----

func.func @flatten_too_small(%w: tensor<4x8xf32>, %b: tensor<8xf32>) {
  // expected-error @+1 {{'md.flatten' op operands hold 40 elements in total, more than the 32-element result}}
  %0 = md.flatten %w, %b : tensor<4x8xf32>, tensor<8xf32> to tensor<32xf32>
  return
}

// -----

func.func @view_past_end(%flat: tensor<1024xf32>) {
  // expected-error @+1 {{'md.view' op view of 32 elements at offset 1000 runs past the end of the 1024-element buffer}}
  %0 = md.view %flat[1000] : tensor<1024xf32> to tensor<4x8xf32>
  return
}

// -----

func.func @view_larger_than_buffer(%flat: tensor<16xf32>) {
  // expected-error @+1 {{'md.view' op view of 32 elements at offset 0 runs past the end of the 16-element buffer}}
  %0 = md.view %flat[0] : tensor<16xf32> to tensor<32xf32>
  return
}

// -----

func.func @view_negative_offset(%flat: tensor<1024xf32>) {
  // expected-error @+1 {{'md.view' op offset must be >= 0, got -1}}
  %0 = md.view %flat[-1] : tensor<1024xf32> to tensor<8xf32>
  return
}

// -----

func.func @view_element_type(%flat: tensor<1024xf32>) {
  // expected-error @+1 {{'md.view' op result element type 'bf16' differs from the buffer's element type 'f32'}}
  %0 = md.view %flat[0] : tensor<1024xf32> to tensor<8xbf16>
  return
}

// -----

func.func @view_source_not_1d(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'md.view' op source must be a static 1-D buffer, got 'tensor<4x8xf32>'}}
  %0 = md.view %x[0] : tensor<4x8xf32> to tensor<8xf32>
  return
}

// -----

func.func @view_dynamic_result(%flat: tensor<1024xf32>) {
  // expected-error @+1 {{'md.view' op result must have a static shape, got 'tensor<?xf32>'}}
  %0 = md.view %flat[0] : tensor<1024xf32> to tensor<?xf32>
  return
}
