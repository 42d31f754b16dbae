// The table families registered with the lookup library (family.h).
#include "registered.h"
#include "wavetune/family.h"

namespace wavetune {

const std::vector<const TableFamily*>& table_families() { return detail::registered<TableFamily>(); }

const TableFamily* find_table_family(const std::string& name) { return detail::find_registered<TableFamily>(name); }

}  // namespace wavetune
