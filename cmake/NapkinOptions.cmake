# napkin_options: the one INTERFACE target that carries warnings, sanitizers and standards.
# Every napkin library and executable links it, so flags are set in exactly one place.
add_library(napkin_options INTERFACE)
add_library(napkin::options ALIAS napkin_options)
target_compile_features(napkin_options INTERFACE cxx_std_20)
target_include_directories(napkin_options INTERFACE ${PROJECT_SOURCE_DIR})

set(_napkin_cxx_warnings -Wall -Wextra -Wshadow -Wnon-virtual-dtor -Wold-style-cast
    -Wcast-align -Woverloaded-virtual -Wpedantic -Wimplicit-fallthrough)
if(NAPKIN_WERROR)
    list(APPEND _napkin_cxx_warnings -Werror)
endif()
target_compile_options(napkin_options INTERFACE
    $<$<COMPILE_LANGUAGE:CXX>:${_napkin_cxx_warnings}>)

if(NAPKIN_SANITIZE)
    set(_napkin_san -fsanitize=address,undefined -fno-omit-frame-pointer
        -fno-sanitize-recover=undefined)
    # Not in a target whose NAPKIN_UNINSTRUMENTED property is on (the test binaries' own units,
    # tests/CMakeLists.txt): it links the runtimes all the same. A target's own -fno-sanitize
    # could not undo these, which come after it on the command line.
    target_compile_options(napkin_options INTERFACE
        $<$<AND:$<COMPILE_LANGUAGE:CXX>,$<NOT:$<BOOL:$<TARGET_PROPERTY:NAPKIN_UNINSTRUMENTED>>>>:${_napkin_san}>)
    target_link_options(napkin_options INTERFACE -fsanitize=address,undefined)
    # What an uninstrumented test unit checks for a sanitized build (it has no
    # __SANITIZE_ADDRESS__).
    target_compile_definitions(napkin_options INTERFACE NAPKIN_SANITIZED=1)
    # Executables not position-independent: the sanitizers' per-global and per-check-site data
    # are pointers, 1.46 million relative relocations in a PIE napkin that the loader applies at
    # every start (0.54 s of `napkin --version`, 0.30 s without; the CLI tests start napkin
    # hundreds of times). Without PIE the linker resolves them.
    target_link_options(napkin_options INTERFACE
        $<$<STREQUAL:$<TARGET_PROPERTY:TYPE>,EXECUTABLE>:-no-pie>)
endif()
