#include "scenarios/error.h"

#include <algorithm>

namespace clustersim {

std::string SourceMark::str() const {
  if (!known()) return file.empty() ? std::string("<input>") : file;
  return file + ":" + std::to_string(line) + ":" + std::to_string(column);
}

std::string printable(const std::string& text) {
  // A value quoted into a message is shown whole up to 120 bytes; a longer one keeps its
  // ends and says how long it was (a 5 MB value is not echoed back). Then control bytes
  // (NUL included) are escaped, so a message is one readable line.
  std::string short_text;
  short_text.reserve(std::min<size_t>(text.size(), 4096));
  for (size_t i = 0; i < text.size();) {
    if (text[i] == '\'') {
      const size_t end = text.find('\'', i + 1);
      if (end != std::string::npos && end - i - 1 > 120) {
        short_text += text.substr(i, 41) + "...(" + std::to_string(end - i - 1) + " bytes)..." + text.substr(end - 40, 41);
        i = end + 1;
        continue;
      }
    }
    short_text += text[i++];
  }
  std::string out;
  out.reserve(short_text.size());
  for (char ch : short_text) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c < 0x20 && c != '\n') {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    } else {
      out += ch;
    }
  }
  if (out.size() > 4096) out = out.substr(0, 4000) + "...(" + std::to_string(text.size()) + " bytes in all)";
  return out;
}

InputError::InputError(SourceMark mark, const std::string& what)
    : std::runtime_error(printable(mark.str()) + ": error: " + printable(what)),
      mark_(std::move(mark)),
      detail_(printable(what)) {}

}  // namespace clustersim
