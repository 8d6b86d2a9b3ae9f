#include "core/error.h"

#include <new>

namespace h5d {

void rethrow_with_context(const std::string& context) {
  try {
    throw;
  } catch (const Error& e) {
    throw Error(e.code(), context + ": " + e.what(), e.logged());
  } catch (const std::bad_alloc&) {
    throw Error(ENOMEM, context + ": out of memory");
  } catch (const std::exception& e) {
    throw Error(EIO, context + ": " + e.what());
  }
}

}  // namespace h5d
