# Library code names a setting by its field, the CLI by its flag (core/check.h, name_fields;
# cli/flag_names.cpp). Run by CTest as `cmake -DSOURCE_DIR=<repo> -P check_flag_names.cmake`:
# fails naming the file and line of a string literal in core/ or estimator/ that spells a flag
# ("--zero ..."), and of a `{field}` mark that the CLI's table has no row for.
file(GLOB_RECURSE sources ${SOURCE_DIR}/core/*.cpp ${SOURCE_DIR}/core/*.h ${SOURCE_DIR}/core/*.cu
    ${SOURCE_DIR}/estimator/*.cpp ${SOURCE_DIR}/estimator/*.h)
file(READ ${SOURCE_DIR}/cli/flag_names.cpp table)
set(failures "")
foreach(source ${sources})
    file(READ ${source} text)
    # Out of the way of CMake's lists: their separator, the brackets that stop a split and the
    # backslash that escapes one.
    foreach(c ";" "[" "]" "\\")
        string(REPLACE "${c}" "<c>" text "${text}")
    endforeach()
    string(REPLACE "\n" ";" lines "${text}")
    file(RELATIVE_PATH name ${SOURCE_DIR} ${source})
    set(n 0)
    foreach(line IN LISTS lines)
        math(EXPR n "${n} + 1")
        if(line MATCHES "^[ \t]*//")
            continue()  # a comment may quote a flag
        endif()
        # Drop a trailing comment: from the first // outside a string literal.
        string(REGEX REPLACE "^(([^\"/]|/[^/\"]|\"[^\"]*\")*)//.*$" "\\1" code "${line}")
        string(REGEX MATCHALL "\"[^\"]*\"" literals "${code}")
        foreach(literal IN LISTS literals)
            if(literal MATCHES "(^\"|[ (/])--[a-z]")
                string(APPEND failures "${name}:${n}: a flag in library text: ${literal}\n")
            endif()
            string(REGEX MATCHALL "{[a-z][a-z0-9_]*}" fields "${literal}")
            foreach(field IN LISTS fields)
                string(REGEX REPLACE "[{}]" "" field "${field}")
                string(FIND "${table}" "{\"${field}\", \"--" row)
                if(row EQUAL -1)
                    string(APPEND failures
                        "${name}:${n}: {${field}} has no row in cli/flag_names.cpp's kFlags\n")
                endif()
            endforeach()
        endforeach()
    endforeach()
endforeach()
if(failures)
    message(FATAL_ERROR "library text names flags, not fields:\n${failures}")
endif()
