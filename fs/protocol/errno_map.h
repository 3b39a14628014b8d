// Status -> errno: the one switch (STYLE.md habit 3), used for FUSE replies.
#pragma once

#include "common/status.h"

namespace clio {
int ToErrno(const Status& s);
}
