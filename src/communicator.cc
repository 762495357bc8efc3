#include "lens/communicator.h"

namespace lens {

std::string Communicator::describe_failure(std::string_view what, std::string_view why) const {
  return "lens: " + std::string(what) + " failed on rank " + std::to_string(rank()) + " of " +
         std::to_string(size()) + " (" + engine() + "): " + std::string(why);
}

}  // namespace lens
