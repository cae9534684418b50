# Injected into llama-cpp-python's build by scripts/setup.sh (CMAKE_PROJECT_INCLUDE: CMake runs it after every
# project() call). llama-cpp-python forces llama.cpp's `common` library on just before it adds llama.cpp; the
# offline default loads only libllama and the ggml libraries (infill/backends/offline/runtime.py calls the C API
# through ctypes), so turning `common` off again at llama.cpp's own project() call saves compiling it. The
# programs are already off when llama.cpp is built as a subdirectory; they are named here so that a newer
# llama-cpp-python that turns them on still builds only the runtime. (LLAVA_BUILD=OFF, for the multimodal
# library, is a plain option of llama-cpp-python's and is set on the command line.)
foreach(program_option LLAMA_BUILD_COMMON LLAMA_BUILD_TESTS LLAMA_BUILD_TOOLS LLAMA_BUILD_EXAMPLES
        LLAMA_BUILD_SERVER LLAMA_BUILD_APP LLAMA_BUILD_MTMD)
    set(${program_option} OFF CACHE BOOL "off: infill-ls loads only the llama.cpp runtime" FORCE)
endforeach()
