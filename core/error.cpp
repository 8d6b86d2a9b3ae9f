#include "core/error.h"

#include <new>

namespace h5d {

void rethrow_with_context(const std::string& context, const Place& place) {
  try {
    throw;
  } catch (const Error& e) {
    throw Error(e.code(), context + ": " + e.what(), e.logged(), e.place().empty() ? place : e.place());
  } catch (const std::bad_alloc&) {
    throw Error(ENOMEM, context + ": out of memory", false, place);
  } catch (const std::exception& e) {
    throw Error(EIO, context + ": " + e.what(), false, place);
  }
}

void rethrow_at(const Place& place) {
  try {
    throw;
  } catch (const Error& e) {
    if (!e.place().empty()) throw;
    throw Error(e.code(), e.what(), e.logged(), place);
  } catch (const std::bad_alloc&) {
    throw Error(ENOMEM, "out of memory", false, place);
  } catch (const std::exception& e) {
    throw Error(EIO, e.what(), false, place);
  }
}

Place place_of(const std::exception& e) {
  const auto* err = dynamic_cast<const Error*>(&e);
  return err ? err->place() : Place{};
}

}  // namespace h5d
