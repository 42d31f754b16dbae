// The paged attention kernels' API: part of the attention family's header, attention.h ("Paged attention").
#pragma once

#include "wavetune/attention.h"
