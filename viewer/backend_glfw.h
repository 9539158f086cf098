// The platform layer: a GLFW window with an OpenGL 3.3 core context and ImGui's GLFW and
// OpenGL3 backends (compiled into Debian's libimgui.a). Headless mode renders into an offscreen
// framebuffer of exactly the requested size inside a hidden window (it still needs an X display:
// run it under xvfb-run) and reads it back for PNGs and frame timings. Nothing here knows the
// panels: a frame is a callback.
#pragma once

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

struct GLFWwindow;

namespace napkin::viewer {

struct WindowOptions {
    int width = 1600;
    int height = 900;
    bool headless = false;  // hidden window, offscreen framebuffer, no vsync
    std::string title = "napkin view";
};

// One frame's input given instead of the window's (scripted input: the viewer's input tests).
// It replaces, for that frame, what the platform reported: the pointer, the buttons held, the
// wheel, the keys held and the text typed. Keys are the platform's codes as ImGui 1.86 indexes
// io.KeysDown with them (GLFW_KEY_*: a letter is its upper-case ASCII, 'F'; Enter is
// GLFW_KEY_ENTER). A click is two frames: one with the button held, one without.
struct FrameInput {
    float mouse_x = -1.0f, mouse_y = -1.0f;  // pixels from the top left; negative: no pointer
    bool left_down = false;
    bool right_down = false;  // a right drag marks a time range on the timeline
    float wheel = 0.0f;       // notches, > 0 away from the user (zoom in)
    bool shift = false;
    std::vector<int> keys_down;
    std::string text;  // UTF-8 characters typed
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
    // With `input`, that input replaces the window's for this frame.
    void frame(const std::function<void()>& draw, const FrameInput* input = nullptr);
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
