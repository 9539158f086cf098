# The model layer and the estimator include nothing that runs (docs/LAYOUT.md). Run by CTest as
# `cmake -DSOURCE_DIR=<repo> -DMODEL_SOURCES=<napkin_model's .cpp files> -P ...`: fails naming the
# file and the include when a napkin_model or napkin_estimator file includes a header outside
# the layer: the model layer's own headers, the header-only ones below, the kernels' cost
# headers (kernels/<op>.h, not kernels/cpu/ or kernels/cuda/) and, for the estimator, its own.
cmake_minimum_required(VERSION 3.25)  # the policies of the project (IN_LIST)
set(header_only core/dtype.h core/enum_names.h core/half.h core/fp8.h core/comm/collective.h
    # Its enums only (MemCategory, DeviceKind): nothing of the allocator is linked. They belong
    # in a header of the model layer (docs/LAYOUT.md, "Left for later").
    core/allocator.h)
set(allowed ${header_only})
set(files "")
foreach(cpp IN LISTS MODEL_SOURCES)
    file(RELATIVE_PATH cpp ${SOURCE_DIR} ${cpp})
    string(REGEX REPLACE "\\.cpp$" ".h" h ${cpp})
    list(APPEND files ${cpp})
    if(EXISTS ${SOURCE_DIR}/${h})
        list(APPEND allowed ${h})
        list(APPEND files ${h})
    endif()
endforeach()
list(APPEND files ${header_only})
list(REMOVE_ITEM files core/allocator.h)
file(GLOB estimator RELATIVE ${SOURCE_DIR} ${SOURCE_DIR}/estimator/*.cpp ${SOURCE_DIR}/estimator/*.h)
set(failures "")
foreach(f IN LISTS files estimator)
    file(STRINGS ${SOURCE_DIR}/${f} includes REGEX "^#include \"")
    foreach(line IN LISTS includes)
        string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" inc "${line}")
        if(inc IN_LIST allowed OR inc MATCHES "^kernels/[a-z0-9_]+\\.h$")
            continue()
        endif()
        if(f MATCHES "^estimator/" AND inc MATCHES "^estimator/")
            continue()
        endif()
        string(APPEND failures "${f}: includes ${inc}, above the model layer\n")
    endforeach()
endforeach()
if(failures)
    message(FATAL_ERROR "the model layer or the estimator reaches above it (docs/LAYOUT.md):\n"
                        "${failures}")
endif()
