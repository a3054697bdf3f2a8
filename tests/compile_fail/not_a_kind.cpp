// expect: Kinds must list distinct types that model accel::policy::PolicyKind
// A bundle over a list holding something that is not a kind is refused with one clear error.
#include <boost/mp11/list.hpp>

#include "accel/policy/policies.hpp"

using P = accel::basic_policies<boost::mp11::mp_list<accel::policy::precision_kind, int>, accel::policy::bf16>;
P* p = nullptr;
P::kinds* k = nullptr;
