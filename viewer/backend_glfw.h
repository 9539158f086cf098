// The platform layer: a GLFW window with an OpenGL 3.3 core context and ImGui's GLFW and
// OpenGL3 backends (compiled into Debian's libimgui.a). Headless mode renders into an offscreen
// framebuffer of exactly the requested size inside a hidden window (it still needs an X display:
// run it under xvfb-run) and reads it back for PNGs and frame timings. Nothing here knows the
// panels: a frame is a callback.
#pragma once

#include <filesystem>
#include <functional>
#include <string>

struct GLFWwindow;

namespace napkin::viewer {

struct WindowOptions {
    int width = 1600;
    int height = 900;
    bool headless = false;  // hidden window, offscreen framebuffer, no vsync
    std::string title = "napkin view";
};

class GlfwBackend {
public:
    // Throws std::runtime_error with one line ("cannot open a window: ... (no display? ...)").
    explicit GlfwBackend(const WindowOptions& options);
    ~GlfwBackend();
    GlfwBackend(const GlfwBackend&) = delete;
    GlfwBackend& operator=(const GlfwBackend&) = delete;

    bool should_close() const;
    // Polls input, builds one ImGui frame with `draw`, renders it and (windowed) swaps. Headless
    // frames end with glFinish, so the time a frame takes includes the rasterization.
    void frame(const std::function<void()>& draw);
    // Headless only: writes the last frame as an RGB PNG (stb_image_write). "" or an error.
    std::string save_png(const std::filesystem::path& path) const;
    // Headless only: the last frame's pixels, RGB, top row first.
    std::string read_pixels(std::string& rgb) const;
    // GL_RENDERER and GL_VERSION ("llvmpipe (LLVM 15.0.6, 256 bits), 4.5 (Core Profile)
    // Mesa 22.3.6").
    std::string renderer() const;
    int width() const { return width_; }
    int height() const { return height_; }

private:
    GLFWwindow* window_ = nullptr;
    int width_ = 0, height_ = 0;
    bool headless_ = false;
    unsigned fbo_ = 0, color_rb_ = 0;
    bool imgui_ready_ = false;
};

}  // namespace napkin::viewer
