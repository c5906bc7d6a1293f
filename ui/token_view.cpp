#include "token_view.h"

namespace studio {

QString tokensToHtml(const deltatune::PreviewExample& ex) {
  QString html = QStringLiteral("<div style='font-family: monospace; line-height: 170%;'>");
  int i = 0;
  for (const deltatune::PreviewTokenRun& run : deltatune::preview_token_runs(ex)) {
    const deltatune::PreviewToken& t = ex.tokens[run.first];
    if (t.image) {  // an image's placeholder tokens: one box "<|image_pad|> × N"
      html += QStringLiteral("<span title='id %1, %2 image tokens (one per merged patch), not trained' "
                             "style='background-color:#d6e4f7; color:#1f3f77;'>%3&nbsp;&times;&nbsp;%2</span>")
                  .arg(t.id)
                  .arg(run.count)
                  .arg(QString::fromStdString(t.text).toHtmlEscaped());
      ++i;
      continue;
    }
    QString text = QString::fromStdString(t.text).toHtmlEscaped();
    const bool newline = text.contains('\n');
    text.replace(' ', QStringLiteral("&middot;"));
    text.replace('\t', QStringLiteral("&rarr;"));
    text.replace('\n', QStringLiteral("&crarr;"));
    if (text.isEmpty()) text = QStringLiteral("&empty;");
    // Alternating shades mark the boundaries; trained tokens are green, prompt tokens grey.
    const bool odd = (i++ % 2) == 1;
    const char* bg = t.trained ? (odd ? "#93d18b" : "#cdeec7") : (odd ? "#cfcfcf" : "#f0f0f0");
    const char* fg = t.trained ? "#0d4a12" : "#444444";
    html += QStringLiteral("<span title='id %1%2' style='background-color:%3; color:%4;'>%5</span>")
                .arg(t.id)
                .arg(t.trained ? QStringLiteral(" (trained)") : QString())
                .arg(QLatin1String(bg), QLatin1String(fg), text);
    if (newline) html += QStringLiteral("<br/>");
  }
  if (ex.truncated) html += QStringLiteral("<br/><span style='color:#b00020;'>[truncated]</span>");
  html += QStringLiteral("</div>");
  return html;
}

}  // namespace studio
