// RUN: md-opt %s -split-input-file -verify-diagnostics
// Every md.-prefixed discardable attribute is one MdBase.td declares, with
// the type it declares, where it belongs.

func.func @unknown(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{unknown md attribute 'md.units_typo' (MdBase.td declares the md dialect's discardable attributes)}}
  %0 = md.scale %x by 2.0 {md.units_typo = 1 : i64} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @unit_type(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'md.unit' must be an integer, not "u1"}}
  %0 = md.scale %x by 2.0 {md.unit = "u1"} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @wait_type(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'md.wait' must be an array<i64>, not [0, 1]}}
  %0 = md.scale %x by 2.0 {md.wait = [0, 1]} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

func.func @backward_type(%x: tensor<4xf32>) -> tensor<4xf32> {
  // expected-error @+1 {{'md.backward' must be a unit attribute, not true}}
  %0 = md.scale %x by 2.0 {md.backward = true} : tensor<4xf32>
  return %0 : tensor<4xf32>
}

// -----

// expected-error @+1 {{'md.grad_of' belongs on a function result, not on an operation}}
func.func @grad_of_on_op(%x: tensor<4xf32>) -> tensor<4xf32> attributes {md.grad_of = @w} {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{'md.unit' belongs on an operation, not on a function result}}
func.func @unit_on_result(%x: tensor<4xf32>) -> (tensor<4xf32> {md.unit = 1 : i64}) {
  return %x : tensor<4xf32>
}

// -----

// expected-error @+1 {{'md.grad_of' must be a flat symbol reference, not "w"}}
func.func @grad_of_type(%x: tensor<4xf32>) -> (tensor<4xf32> {md.grad_of = "w"}) {
  return %x : tensor<4xf32>
}
