#include "viewer/backend_glfw.h"

#include <cfloat>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

#define GLFW_INCLUDE_NONE
#include <GL/gl.h>
#include <GL/glext.h>
#include <GLFW/glfw3.h>
#include <backends/imgui_impl_glfw.h>
#include <backends/imgui_impl_opengl3.h>
#include <imgui.h>
#include <stb_image_write.h>

#include "core/durable_file.h"

namespace napkin::viewer {

namespace {

// GL 3.0 framebuffer objects are not in libGL's 1.x ABI: fetched from the context.
struct FboApi {
    PFNGLGENFRAMEBUFFERSPROC gen_framebuffers = nullptr;
    PFNGLBINDFRAMEBUFFERPROC bind_framebuffer = nullptr;
    PFNGLDELETEFRAMEBUFFERSPROC delete_framebuffers = nullptr;
    PFNGLGENRENDERBUFFERSPROC gen_renderbuffers = nullptr;
    PFNGLBINDRENDERBUFFERPROC bind_renderbuffer = nullptr;
    PFNGLDELETERENDERBUFFERSPROC delete_renderbuffers = nullptr;
    PFNGLRENDERBUFFERSTORAGEPROC renderbuffer_storage = nullptr;
    PFNGLFRAMEBUFFERRENDERBUFFERPROC framebuffer_renderbuffer = nullptr;
    PFNGLCHECKFRAMEBUFFERSTATUSPROC check_framebuffer_status = nullptr;

    bool load() {
        // GLFWglproc is void (*)(void), which casts to any function pointer type.
        gen_framebuffers =
            reinterpret_cast<PFNGLGENFRAMEBUFFERSPROC>(glfwGetProcAddress("glGenFramebuffers"));
        bind_framebuffer =
            reinterpret_cast<PFNGLBINDFRAMEBUFFERPROC>(glfwGetProcAddress("glBindFramebuffer"));
        delete_framebuffers = reinterpret_cast<PFNGLDELETEFRAMEBUFFERSPROC>(
            glfwGetProcAddress("glDeleteFramebuffers"));
        gen_renderbuffers =
            reinterpret_cast<PFNGLGENRENDERBUFFERSPROC>(glfwGetProcAddress("glGenRenderbuffers"));
        bind_renderbuffer =
            reinterpret_cast<PFNGLBINDRENDERBUFFERPROC>(glfwGetProcAddress("glBindRenderbuffer"));
        delete_renderbuffers = reinterpret_cast<PFNGLDELETERENDERBUFFERSPROC>(
            glfwGetProcAddress("glDeleteRenderbuffers"));
        renderbuffer_storage = reinterpret_cast<PFNGLRENDERBUFFERSTORAGEPROC>(
            glfwGetProcAddress("glRenderbufferStorage"));
        framebuffer_renderbuffer = reinterpret_cast<PFNGLFRAMEBUFFERRENDERBUFFERPROC>(
            glfwGetProcAddress("glFramebufferRenderbuffer"));
        check_framebuffer_status = reinterpret_cast<PFNGLCHECKFRAMEBUFFERSTATUSPROC>(
            glfwGetProcAddress("glCheckFramebufferStatus"));
        return gen_framebuffers && bind_framebuffer && delete_framebuffers && gen_renderbuffers &&
               bind_renderbuffer && delete_renderbuffers && renderbuffer_storage &&
               framebuffer_renderbuffer && check_framebuffer_status;
    }
};

FboApi& fbo_api() {
    static FboApi api;
    return api;
}

std::string glfw_error_text() {
    const char* desc = nullptr;
    glfwGetError(&desc);
    return desc != nullptr ? desc : "unknown GLFW error";
}

void load_fonts() {
    ImGuiIO& io = ImGui::GetIO();
    // A proportional font when the system has one (fonts-dejavu-core); ImGui's built-in otherwise.
    for (const char* path : {"/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf"}) {
        std::error_code ec;
        if (std::filesystem::exists(path, ec) &&
            io.Fonts->AddFontFromFileTTF(path, 15.0f) != nullptr)
            return;
    }
    io.Fonts->AddFontDefault();
}

// After the GLFW backend's NewFrame (which sets the pointer and buttons from the window) and
// before ImGui's: ImGui 1.86 reads the io fields directly (no input event queue yet).
void apply_input(ImGuiIO& io, const FrameInput& in) {
    io.MousePos = in.mouse_x >= 0.0f && in.mouse_y >= 0.0f ? ImVec2(in.mouse_x, in.mouse_y)
                                                           : ImVec2(-FLT_MAX, -FLT_MAX);
    for (bool& down : io.MouseDown)
        down = false;
    io.MouseDown[ImGuiMouseButton_Left] = in.left_down;
    io.MouseDown[ImGuiMouseButton_Right] = in.right_down;
    io.MouseWheel = in.wheel;
    io.MouseWheelH = 0.0f;
    for (bool& down : io.KeysDown)
        down = false;
    for (int k : in.keys_down) {
        if (k >= 0 && k < IM_ARRAYSIZE(io.KeysDown)) io.KeysDown[k] = true;
    }
    io.KeyShift = in.shift;
    io.KeyCtrl = io.KeyAlt = io.KeySuper = false;
    if (!in.text.empty()) io.AddInputCharactersUTF8(in.text.c_str());
}

}  // namespace

GlfwBackend::GlfwBackend(const WindowOptions& options)
    : width_(options.width), height_(options.height), headless_(options.headless) {
    if (!glfwInit()) {
        throw std::runtime_error("cannot open a window: " + glfw_error_text() +
                                 " (no display? set DISPLAY or run under xvfb-run -a)");
    }
    glfwWindowHint(GLFW_CONTEXT_VERSION_MAJOR, 3);
    glfwWindowHint(GLFW_CONTEXT_VERSION_MINOR, 3);
    glfwWindowHint(GLFW_OPENGL_PROFILE, GLFW_OPENGL_CORE_PROFILE);
    glfwWindowHint(GLFW_OPENGL_FORWARD_COMPAT, GLFW_TRUE);
    if (headless_) glfwWindowHint(GLFW_VISIBLE, GLFW_FALSE);
    window_ = glfwCreateWindow(width_, height_, options.title.c_str(), nullptr, nullptr);
    if (window_ == nullptr) {
        const std::string err = glfw_error_text();
        glfwTerminate();
        throw std::runtime_error("cannot create an OpenGL 3.3 window: " + err);
    }
    glfwMakeContextCurrent(window_);
    glfwSwapInterval(headless_ ? 0 : 1);
    if (headless_) {
        FboApi& gl = fbo_api();
        if (!gl.load()) {
            glfwDestroyWindow(window_);
            glfwTerminate();
            throw std::runtime_error("the OpenGL context has no framebuffer objects");
        }
        gl.gen_framebuffers(1, &fbo_);
        gl.gen_renderbuffers(1, &color_rb_);
        gl.bind_renderbuffer(GL_RENDERBUFFER, color_rb_);
        gl.renderbuffer_storage(GL_RENDERBUFFER, GL_RGBA8, width_, height_);
        gl.bind_framebuffer(GL_FRAMEBUFFER, fbo_);
        gl.framebuffer_renderbuffer(GL_FRAMEBUFFER, GL_COLOR_ATTACHMENT0, GL_RENDERBUFFER,
                                    color_rb_);
        if (gl.check_framebuffer_status(GL_FRAMEBUFFER) != GL_FRAMEBUFFER_COMPLETE) {
            glfwDestroyWindow(window_);
            glfwTerminate();
            throw std::runtime_error("cannot create a " + std::to_string(width_) + "x" +
                                     std::to_string(height_) + " offscreen framebuffer");
        }
    }
    IMGUI_CHECKVERSION();
    ImGui::CreateContext();
    ImGuiIO& io = ImGui::GetIO();
    io.IniFilename = nullptr;  // no imgui.ini written next to the user's files
    ImGui::StyleColorsDark();
    ImGui::GetStyle().FrameRounding = 2.0f;
    load_fonts();
    ImGui_ImplGlfw_InitForOpenGL(window_, true);
    ImGui_ImplOpenGL3_Init("#version 330 core");
    imgui_ready_ = true;
}

GlfwBackend::~GlfwBackend() {
    if (imgui_ready_) {
        ImGui_ImplOpenGL3_Shutdown();
        ImGui_ImplGlfw_Shutdown();
        ImGui::DestroyContext();
    }
    if (fbo_ != 0) {
        fbo_api().delete_framebuffers(1, &fbo_);
        fbo_api().delete_renderbuffers(1, &color_rb_);
    }
    if (window_ != nullptr) glfwDestroyWindow(window_);
    glfwTerminate();
}

bool GlfwBackend::should_close() const {
    return glfwWindowShouldClose(window_) != 0;
}

void GlfwBackend::frame(const std::function<void()>& draw, const FrameInput* input) {
    glfwPollEvents();
    ImGui_ImplOpenGL3_NewFrame();
    ImGui_ImplGlfw_NewFrame();
    ImGuiIO& io = ImGui::GetIO();
    if (input != nullptr) apply_input(io, *input);
    int fb_w = width_, fb_h = height_;
    if (headless_) {
        io.DisplaySize = ImVec2(static_cast<float>(width_), static_cast<float>(height_));
        io.DisplayFramebufferScale = ImVec2(1.0f, 1.0f);
    } else {
        glfwGetFramebufferSize(window_, &fb_w, &fb_h);
    }
    ImGui::NewFrame();
    draw();
    ImGui::Render();
    if (headless_) fbo_api().bind_framebuffer(GL_FRAMEBUFFER, fbo_);
    glViewport(0, 0, fb_w, fb_h);
    glClearColor(0.09f, 0.09f, 0.10f, 1.0f);
    glClear(GL_COLOR_BUFFER_BIT);
    ImGui_ImplOpenGL3_RenderDrawData(ImGui::GetDrawData());
    if (headless_) {
        glFinish();
    } else {
        glfwSwapBuffers(window_);
    }
}

std::string GlfwBackend::renderer() const {
    const auto* r = reinterpret_cast<const char*>(glGetString(GL_RENDERER));
    const auto* v = reinterpret_cast<const char*>(glGetString(GL_VERSION));
    return std::string(r != nullptr ? r : "?") + ", " + (v != nullptr ? v : "?");
}

std::string GlfwBackend::read_pixels(std::string& rgb) const {
    if (!headless_) return "screenshots need headless mode";
    fbo_api().bind_framebuffer(GL_FRAMEBUFFER, fbo_);
    std::vector<unsigned char> rgba(static_cast<std::size_t>(width_) *
                                    static_cast<std::size_t>(height_) * 4);
    glPixelStorei(GL_PACK_ALIGNMENT, 1);
    glReadPixels(0, 0, width_, height_, GL_RGBA, GL_UNSIGNED_BYTE, rgba.data());
    if (glGetError() != GL_NO_ERROR) return "glReadPixels failed";
    // OpenGL's rows go bottom-up; PNG's top-down.
    rgb.resize(static_cast<std::size_t>(width_) * static_cast<std::size_t>(height_) * 3);
    for (int y = 0; y < height_; ++y) {
        const unsigned char* src =
            rgba.data() + static_cast<std::size_t>(height_ - 1 - y) * width_ * 4;
        char* dst = rgb.data() + static_cast<std::size_t>(y) * width_ * 3;
        for (int x = 0; x < width_; ++x) {
            dst[3 * x + 0] = static_cast<char>(src[4 * x + 0]);
            dst[3 * x + 1] = static_cast<char>(src[4 * x + 1]);
            dst[3 * x + 2] = static_cast<char>(src[4 * x + 2]);
        }
    }
    return "";
}

std::string GlfwBackend::save_png(const std::filesystem::path& path) const {
    std::string rgb;
    if (std::string err = read_pixels(rgb); !err.empty()) return err;
    // Encoded straight into a durable file (a temporary beside the target, renamed), so a PNG
    // that exists is whole.
    DurableFile file(path);
    const auto sink = [](void* context, void* data, int size) {
        static_cast<DurableFile*>(context)->write(data, static_cast<std::size_t>(size));
    };
    if (stbi_write_png_to_func(sink, &file, width_, height_, 3, rgb.data(), width_ * 3) == 0)
        return "cannot write " + path.string() + ": the PNG encoder failed";
    if (!file.commit()) return file.error();
    return "";
}

}  // namespace napkin::viewer
