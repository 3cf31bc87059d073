// libnghttp2 as the system installs it (Debian: libnghttp2-dev, 1.52; the classic API, no `*2` variants).
#include <nghttp2/nghttp2.h>
