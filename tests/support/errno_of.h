// The errno of the h5d::Error a call throws, for tests that check which error a refusal is.
#pragma once
#include "core/error.h"

namespace h5d::test {

// The code of the h5d::Error `fn` throws; 0 when it throws nothing (other exceptions pass).
template <class Fn>
int errno_of(Fn&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  return 0;
}

}  // namespace h5d::test
