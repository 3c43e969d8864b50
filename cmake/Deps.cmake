# Debian libraries hearth links against. Located with find_path/find_library so that a
# prefix unpacked from a .deb (dpkg -x) works through CMAKE_PREFIX_PATH on machines without apt.
set(HEARTH_DEP_LIBS "")
set(HEARTH_DEP_INCLUDES "")

macro(hearth_require_lib var header lib)
  find_path(${var}_INCLUDE ${header})
  find_library(${var}_LIB NAMES ${lib})
  if(NOT ${var}_INCLUDE OR NOT ${var}_LIB)
    message(FATAL_ERROR "hearth needs ${lib} (${header}); on Debian: sudo scripts/install-deps.sh")
  endif()
  list(APPEND HEARTH_DEP_LIBS ${${var}_LIB})
  list(APPEND HEARTH_DEP_INCLUDES ${${var}_INCLUDE})
endmacro()

hearth_require_lib(JANSSON jansson.h jansson)
hearth_require_lib(PCRE2 pcre2.h pcre2-8)
hearth_require_lib(UTF8PROC utf8proc.h utf8proc)

find_path(MHD_INCLUDE microhttpd.h)
find_library(MHD_LIB NAMES microhttpd)
if(MHD_INCLUDE AND MHD_LIB)
  set(HEARTH_HAVE_MHD ON)
else()
  set(HEARTH_HAVE_MHD OFF)
  message(STATUS "hearth: libmicrohttpd not found, the server is not built")
endif()

# libcurl: `hearth pull` (src/load/hub_pull.c). Optional so that a machine without its headers
# (the GPU machine's .deps carry none) still builds; hub_pull then says it was built without it.
find_path(CURL_INCLUDE curl/curl.h)
find_library(CURL_LIB NAMES curl)
if(CURL_INCLUDE AND CURL_LIB)
  set(HEARTH_HAVE_CURL ON)
  list(APPEND HEARTH_DEP_LIBS ${CURL_LIB})
  list(APPEND HEARTH_DEP_INCLUDES ${CURL_INCLUDE})
else()
  set(HEARTH_HAVE_CURL OFF)
  message(STATUS "hearth: libcurl not found, `hearth pull` is not built (scripts/install-deps.sh)")
endif()
