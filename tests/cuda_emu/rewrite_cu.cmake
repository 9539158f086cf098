# cmake -DIN=kernels/cuda/x.cu -DOUT=build/.../x.cpp -P rewrite_cu.cmake
#
# Copies a .cu file into C++ that g++ compiles against tests/cuda_emu/cuda_emu.h: the two pieces
# of CUDA syntax no header can supply are rewritten, nothing else.
#   name<<<grid, block[, smem[, stream]]>>>(args)
#     -> ::napkin::emu::Launch("name", __FILE__, __LINE__, address, grid, block[, ...])(
#            [&](const auto&... a) { name(a...); }, args)
#     (a generic lambda, so a kernel template is deduced from the arguments as at the launch;
#     it captures by reference, so a kernel chosen into a local function pointer works too;
#     address: kernel_address(name) where smem is given and not 0, for the limit
#     cudaFuncSetAttribute set, else nullptr, so a template launched by deduction compiles)
#   extern __shared__ [__align__(N)] T name[];
#     -> T* name = static_cast<T*>(::napkin::emu::dynamic_shared_memory());
#     (the emulator's buffer is 128-byte aligned, enough for any N a kernel asks of it)
# Line breaks are kept and a #line names the source, so errors and __LINE__ point at the .cu.
# The output is rewritten only when it changes, so an unchanged kernel is not recompiled.
cmake_minimum_required(VERSION 3.25)  # policies: while(TRUE), file(COPY_FILE)
if(NOT IN OR NOT OUT)
    message(FATAL_ERROR "usage: cmake -DIN=<file.cu> -DOUT=<file.cpp> -P rewrite_cu.cmake")
endif()
file(READ "${IN}" text)

# napkin_emu_third_arg(<config> <out-var>): the launch configuration's third argument (the
# dynamic shared memory), stripped, or "" when it has none; commas inside parentheses do not split.
function(napkin_emu_third_arg config out_var)
    string(LENGTH "${config}" n)
    set(depth 0)
    set(index 0)
    set(arg "")
    set(i 0)
    while(i LESS n)
        string(SUBSTRING "${config}" ${i} 1 c)
        if(c STREQUAL "(" OR c STREQUAL "[" OR c STREQUAL "{")
            math(EXPR depth "${depth} + 1")
        elseif(c STREQUAL ")" OR c STREQUAL "]" OR c STREQUAL "}")
            math(EXPR depth "${depth} - 1")
        endif()
        if(c STREQUAL "," AND depth EQUAL 0)
            math(EXPR index "${index} + 1")
        elseif(index EQUAL 2)
            string(APPEND arg "${c}")
        endif()
        math(EXPR i "${i} + 1")
    endwhile()
    string(STRIP "${arg}" arg)
    set(${out_var} "${arg}" PARENT_SCOPE)
endfunction()

set(out "#line 1 \"${IN}\"\n")
while(TRUE)
    string(FIND "${text}" "<<<" open)
    if(open EQUAL -1)
        break()
    endif()
    string(SUBSTRING "${text}" 0 ${open} head)
    string(REGEX MATCH "([A-Za-z_][A-Za-z0-9_]*)$" name "${head}")
    if(name STREQUAL "")
        message(FATAL_ERROR "${IN}: a <<< launch without a kernel name right before it")
    endif()
    string(LENGTH "${head}" head_len)
    string(LENGTH "${name}" name_len)
    math(EXPR keep "${head_len} - ${name_len}")
    string(SUBSTRING "${head}" 0 ${keep} before)

    math(EXPR cfg_start "${open} + 3")
    string(SUBSTRING "${text}" ${cfg_start} -1 rest)
    string(FIND "${rest}" ">>>" close)
    if(close EQUAL -1)
        message(FATAL_ERROR "${IN}: <<< of ${name} without its >>>")
    endif()
    string(SUBSTRING "${rest}" 0 ${close} config)
    math(EXPR after_close "${close} + 3")
    string(SUBSTRING "${rest}" ${after_close} -1 rest)
    string(REGEX MATCH "^[ \t\r\n]*\\(" paren "${rest}")
    if(paren STREQUAL "")
        message(FATAL_ERROR "${IN}: ${name}<<<...>>> not followed by its arguments")
    endif()
    string(LENGTH "${paren}" paren_len)
    string(SUBSTRING "${rest}" ${paren_len} -1 rest)
    # No arguments: the lambda is the last one.
    set(comma ", ")
    if(rest MATCHES "^[ \t\r\n]*\\)")
        set(comma "")
    endif()
    # The kernel's address, for the shared memory cudaFuncSetAttribute allowed it: only where the
    # launch asks for dynamic shared memory (a kernel template launched by deduction has none).
    napkin_emu_third_arg("${config}" smem)
    set(address "nullptr")
    if(NOT smem STREQUAL "" AND NOT smem STREQUAL "0")
        set(address "::napkin::emu::kernel_address(${name})")
    endif()
    string(APPEND out "${before}::napkin::emu::Launch(\"${name}\", __FILE__, __LINE__, "
                      "${address}, ${config})"
                      "${paren}[=](const auto&... napkin_emu_args) { ${name}(napkin_emu_args...); }${comma}")
    set(text "${rest}")
endwhile()
string(APPEND out "${text}")

string(REGEX REPLACE "extern[ \t]+__shared__[ \t]+(__align__\\([0-9]+\\)[ \t]+)?([A-Za-z_][A-Za-z0-9_: ]*[A-Za-z0-9_])[ \t]+([A-Za-z_][A-Za-z0-9_]*)\\[\\];"
       "\\2* \\3 = static_cast<\\2*>(::napkin::emu::dynamic_shared_memory());" out "${out}")
if(out MATCHES "extern[ \t]+__shared__")
    message(FATAL_ERROR "${IN}: an extern __shared__ declaration this script cannot rewrite")
endif()

file(WRITE "${OUT}.tmp" "${out}")
file(COPY_FILE "${OUT}.tmp" "${OUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUT}.tmp")
