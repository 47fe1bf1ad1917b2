// RUN: md-opt --show-dialects | FileCheck %s
// CHECK: Available Dialects:
// CHECK-SAME: md
