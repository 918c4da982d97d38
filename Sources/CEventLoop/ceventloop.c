// Header-only: this file exists so SwiftPM builds the target.
#include "ceventloop.h"
