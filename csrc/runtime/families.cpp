// The kernel families registered with the kernel library (family.h), and tables bound to them.
#include <memory>
#include <string>

#include "registered.h"
#include "wavetune/errors.h"
#include "wavetune/family.h"
#include "wavetune/kernels.h"

namespace wavetune {

const std::vector<const KernelFamily*>& kernel_families() { return detail::registered<KernelFamily>(); }

const KernelFamily* find_kernel_family(const std::string& name) {
  return detail::find_registered<KernelFamily>(name);
}

std::shared_ptr<Selector> open_table(const std::string& path, const std::string& family) {
  const KernelFamily* f = find_kernel_family(family);
  if (!f) {
    std::string known;
    for (const KernelFamily* k : kernel_families()) known += (known.empty() ? "" : ", ") + std::string(k->name);
    WAVETUNE_INVALID("unknown kernel family '", family, "' (", known, ")");
  }
  return std::make_shared<Selector>(Table::load(path), runnable(f->variants()), f->config_space_hash(), family);
}

std::vector<VariantInfo> runnable(const std::vector<VariantInfo>& variants) {
  std::vector<VariantInfo> out;
  for (const VariantInfo& v : variants) {
    if (runs_here(v)) out.push_back(v);
  }
  return out;
}

}  // namespace wavetune
