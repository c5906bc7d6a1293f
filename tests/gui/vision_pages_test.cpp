// Image rows and the vision tower in the studio, on the tiny vision-language checkpoint of tests/goldens/vision
// and its images: the Data page shows each example's images (thumbnail at the image's size, patch grid, tokens)
// beside its tokens, an image's placeholder run as one "<|image_pad|> × N" box, a bad image's error naming file
// and row; the Model page shows the tower; the Train page's estimate grows with the data's image tokens and its
// `vision` LoRA box is on offer only with a tower.
#include <QCheckBox>
#include <QFile>
#include <QImage>
#include <QLabel>
#include <QPixmap>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QTextBrowser>
#include <algorithm>

#include "app_settings.h"
#include "gui_test_util.h"
#include "image_strip.h"
#include "pages/data_page.h"
#include "pages/model_page.h"
#include "pages/train_page.h"
#include "run_document.h"

using namespace studio;

namespace {

const QString kVision = QStringLiteral(DT_SOURCE_DIR "/tests/goldens/vision");

int occurrences(const QString& text, const QString& what) {
  return static_cast<int>(text.count(what));
}

// The chat row of one image and one answer.
QByteArray imageRow(const QString& image, const QString& answer) {
  return QStringLiteral(
             R"({"messages": [{"role": "user", "content": [{"type": "image", "image": "%1"}, )"
             R"({"type": "text", "text": "Describe the picture."}]}, {"role": "assistant", "content": "%2"}]})"
             "\n")
      .arg(image, answer)
      .toUtf8();
}

}  // namespace

class VisionPagesTest : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir tmp_;
  int runs_ = 0;

  // A run on `model` over `dataset`, with its own token cache.
  deltatune::RunConfig config(const QString& model, const QString& dataset) {
    deltatune::RunConfig c;
    c.base_model = model.toStdString();
    c.datasets = {deltatune::DatasetSpec{dataset.toStdString(), "chat", ""}};
    c.sequence_len = 2048;
    c.val_set_size = 0;
    c.dataset_prepared_path = (tmp_.path() + "/cache" + QString::number(++runs_)).toStdString();
    return c;
  }
  // chat_rows.jsonl with its file:// placeholder pointing at the goldens, next to a copy of the images.
  QString goldenRows() {
    const QString dir = tmp_.path() + "/golden";
    QDir().mkpath(dir + "/images");
    for (const QString& f : QDir(kVision + "/images").entryList(QDir::Files))
      QFile::copy(kVision + "/images/" + f, dir + "/images/" + f);
    QFile in(kVision + "/chat_rows.jsonl");
    in.open(QIODevice::ReadOnly);
    QByteArray text = in.readAll();
    text.replace("@VISION_GOLDENS@", kVision.toUtf8());
    QFile out(dir + "/rows.jsonl");
    out.open(QIODevice::WriteOnly);
    out.write(text);
    return out.fileName();
  }
  bool preview(DataPage& page) {
    QSignalSpy ready(&page, &DataPage::previewReady);
    QSignalSpy failed(&page, &DataPage::previewFailed);
    page.refreshPreview();
    return guitest::waitFor([&] { return ready.count() + failed.count() > 0; }, 60000) && ready.count() == 1;
  }

 private slots:
  void initTestCase() {
    QVERIFY(tmp_.isValid());
    guitest::isolate(tmp_);
  }

  void dataPageShowsImagesBesideTokens() {
    AppSettings settings;
    RunDocument doc;
    doc.setConfig(config(kVision + "/model", goldenRows()));
    DataPage page(&doc, &settings);
    QVERIFY2(preview(page), qPrintable(page.errorText()));
    const auto& examples = page.preview().examples;
    QCOMPARE(examples.size(), size_t(3));
    for (int i = 0; i < 3; ++i) {
      page.selectExample(i);
      const auto& ex = examples[static_cast<size_t>(i)];
      QVERIFY(!ex.images.empty());
      ImageStrip* strip = page.imageStrip();
      QCOMPARE(strip->count(), static_cast<int>(ex.images.size()));
      int64_t imageTokens = 0;
      for (const auto& im : ex.images) imageTokens += im.tokens;
      QVERIFY2(page.exampleSourceText().contains(QStringLiteral("(%1 image tokens)").arg(imageTokens)),
               qPrintable(page.exampleSourceText()));
      const QString html = page.exampleView()->toHtml();
      // One box per image: "<|image_pad|> × N" with N the image's tokens, never N copies.
      QCOMPARE(occurrences(html, QStringLiteral("&lt;|image_pad|&gt;")), static_cast<int>(ex.images.size()));
      for (int k = 0; k < strip->count(); ++k) {
        const auto& im = ex.images[static_cast<size_t>(k)];
        QVERIFY(im.tokens > 0);
        QVERIFY2(html.contains(QStringLiteral("&lt;|image_pad|&gt;\u00a0×\u00a0%1").arg(im.tokens)) ||
                     html.contains(QStringLiteral("&lt;|image_pad|&gt;&nbsp;×&nbsp;%1").arg(im.tokens)),
                 qPrintable(html));
        const QPixmap pix = strip->thumbnail(k)->pixmap();
        QVERIFY(!pix.isNull());
        QCOMPARE(pix.size(), QSize(static_cast<int>(im.width), static_cast<int>(im.height)));
        // Qt's own reader agrees on the size of the file (PNG and JPEG; WebP needs a Qt plugin).
        const QImage file(QString::fromStdString(im.path));
        if (!file.isNull()) QCOMPARE(pix.size(), file.size());
        const QString caption = strip->caption(k)->text();
        QVERIFY2(caption.contains(QStringLiteral("%1 × %2 px").arg(im.width).arg(im.height)), qPrintable(caption));
        QVERIFY2(caption.contains(QStringLiteral("%1 tokens").arg(im.tokens)), qPrintable(caption));
      }
    }
    // The third row has three images: the statistics count them all.
    QVERIFY(page.preview().stats.images == 5);
    QCOMPARE(doc.dataImageTokensPerStep(), page.preview().stats.max_image_tokens_per_step);
  }

  void largeImageIsOneBoxOf256Tokens() {
    // A 512 x 512 image under a preprocessor that keeps it at that size: (512/16)² patches, merged 2x2 = 256 tokens.
    const QString model = tmp_.path() + "/model_512";
    QDir().mkpath(model);
    for (const QString& f : QDir(kVision + "/model").entryList(QDir::Files))
      if (f != "preprocessor_config.json") QFile::copy(kVision + "/model/" + f, model + "/" + f);
    QFile pre(model + "/preprocessor_config.json");
    QVERIFY(pre.open(QIODevice::WriteOnly));
    pre.write(R"({"image_processor_type": "Qwen2VLImageProcessor", "patch_size": 16, "merge_size": 2,
      "temporal_patch_size": 2, "resample": 3, "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5],
      "size": {"shortest_edge": 65536, "longest_edge": 16777216}})");
    pre.close();
    QImage big(512, 512, QImage::Format_RGB888);
    for (int y = 0; y < 512; ++y)
      for (int x = 0; x < 512; ++x) big.setPixelColor(x, y, QColor(x / 2, y / 2, (x + y) / 4));
    QVERIFY(big.save(tmp_.path() + "/big.png"));
    QFile rows(tmp_.path() + "/big.jsonl");
    QVERIFY(rows.open(QIODevice::WriteOnly));
    rows.write(imageRow(QStringLiteral("big.png"), QStringLiteral("A gradient.")));
    rows.close();

    AppSettings settings;
    RunDocument doc;
    doc.setConfig(config(model, rows.fileName()));
    DataPage page(&doc, &settings);
    QVERIFY2(preview(page), qPrintable(page.errorText()));
    const auto& ex = page.preview().examples.at(0);
    QCOMPARE(ex.images.size(), size_t(1));
    QCOMPARE(ex.images[0].tokens, int64_t(256));
    int64_t pads = 0;
    for (const auto& t : ex.tokens) pads += t.image;
    QCOMPARE(pads, int64_t(256));
    const QString html = page.exampleView()->toHtml();
    QCOMPARE(occurrences(html, QStringLiteral("&lt;|image_pad|&gt;")), 1);
    QVERIFY2(html.contains(QStringLiteral("× 256")) || html.contains(QStringLiteral("×\u00a0256")) ||
                 html.contains(QStringLiteral("×&nbsp;256")),
             qPrintable(html));
    // The thumbnail is the image scaled down to the thumbnail side.
    const QPixmap pix = page.imageStrip()->thumbnail(0)->pixmap();
    QCOMPARE(pix.size(), QSize(int(deltatune::kPreviewThumbnailSide), int(deltatune::kPreviewThumbnailSide)));
    QVERIFY(page.imageStrip()->caption(0)->text().contains(QStringLiteral("512 × 512 px")));
  }

  void badImageNamesFileAndRow() {
    const QString dir = tmp_.path() + "/bad";
    QDir().mkpath(dir);
    QFile::copy(kVision + "/images/rgb_36x40.png", dir + "/rgb_36x40.png");
    QFile rows(dir + "/bad.jsonl");
    QVERIFY(rows.open(QIODevice::WriteOnly));
    rows.write(imageRow(QStringLiteral("rgb_36x40.png"), QStringLiteral("A red square.")));
    rows.write(imageRow(QStringLiteral("missing.png"), QStringLiteral("Nothing.")));
    rows.close();
    AppSettings settings;
    RunDocument doc;
    deltatune::RunConfig cfg = config(kVision + "/model", rows.fileName());
    doc.setConfig(cfg);
    {
      // Without skip_bad_rows the preview stops with the error.
      DataPage page(&doc, &settings);
      QVERIFY(!preview(page));
      QVERIFY2(page.errorText().contains("bad.jsonl:2") && page.errorText().contains("missing.png"),
               qPrintable(page.errorText()));
    }
    cfg.skip_bad_rows = true;
    doc.setConfig(cfg);
    DataPage page(&doc, &settings);
    QVERIFY2(preview(page), qPrintable(page.errorText()));
    page.selectExample(1);
    QVERIFY(page.exampleError()->isVisibleTo(&page));
    const QString error = page.exampleError()->text();
    QVERIFY2(error.contains("bad.jsonl:2") && error.contains("missing.png"), qPrintable(error));
    QCOMPARE(page.imageStrip()->count(), 1);
    QVERIFY(page.imageStrip()->thumbnail(0)->pixmap().isNull());
    QVERIFY(page.imageStrip()->caption(0)->text().contains("missing.png"));
    page.selectExample(0);
    QVERIFY(!page.exampleError()->isVisibleTo(&page));
    QCOMPARE(page.imageStrip()->thumbnail(0)->pixmap().size(), QSize(36, 40));
  }

  void modelPageShowsVisionTower() {
    AppSettings settings;
    RunDocument doc;
    ModelPage page(&doc, &settings);
    QSignalSpy loaded(&page, &ModelPage::modelLoaded);
    page.loadModel(kVision + "/model");
    QVERIFY(guitest::waitFor([&] { return loaded.count() == 1; }, 30000));
    QVERIFY(page.visionBox()->isVisibleTo(&page));
    const auto& v = doc.modelInfo()->vision;
    QVERIFY(v.present && v.params > 0);
    const QString text = page.visionText();
    QVERIFY2(text.contains(QStringLiteral("%1 / %2").arg(v.depth).arg(v.hidden)), qPrintable(text));
    QVERIFY2(text.contains(QStringLiteral("%1 × %1 pixels").arg(v.patch_size)), qPrintable(text));
    QVERIFY2(text.contains(QStringLiteral("merged %1 × %1").arg(v.merge_size)), qPrintable(text));
    QVERIFY2(text.contains(QStringLiteral("frozen")), qPrintable(text));
    QVERIFY2(text.contains(QStringLiteral("at most %1 tokens").arg(deltatune::image_tokens_for_pixels(*doc.modelInfo()))),
             qPrintable(text));
    // A text-only checkpoint: no vision box.
    QSignalSpy again(&page, &ModelPage::modelLoaded);
    page.loadModel(guitest::demoDir() + "/model");
    QVERIFY(guitest::waitFor([&] { return again.count() == 1; }, 30000));
    QVERIFY(!page.visionBox()->isVisibleTo(&page));
  }

  void estimateGrowsWithImageTokens() {
    RunDocument doc;
    deltatune::RunConfig cfg = config(kVision + "/model", goldenRows());
    cfg.sequence_len = 65536;
    cfg.micro_batch_size = 1;
    cfg.backend = "cuda";
    cfg.gradient_checkpointing_auto = false;
    doc.setConfig(cfg);
    doc.setModelInfo(deltatune::model_info_load((kVision + "/model").toStdString()));
    TrainPage page(&doc, nullptr);
    const deltatune::VramEstimate text = page.vramEstimate();
    QVERIFY(text.total > 0);
    QCOMPARE(text.vision_activations, int64_t(0));
    doc.setDataImageTokensPerStep(1000);
    const deltatune::VramEstimate some = page.vramEstimate();
    doc.setDataImageTokensPerStep(4000);
    const deltatune::VramEstimate more = page.vramEstimate();
    QVERIFY(some.total > text.total);
    QVERIFY(more.total > some.total);
    QCOMPARE(more.vision_activations, 4 * some.vision_activations);
    const deltatune::VramEstimate engine = deltatune::estimate_vram(
        *doc.modelInfo(), static_cast<int>(cfg.lora_r), cfg.sequence_len, cfg.fused_loss, cfg.gradient_checkpointing,
        cfg.gradient_checkpointing_layers, cfg.base_quantization, 1024, deltatune::ImageLoad{4000}, cfg.lora_target_groups);
    QCOMPARE(more.total, engine.total);
    QVERIFY2(page.vramText().contains(QStringLiteral("4,000 image tokens")) ||
                 page.vramText().contains(QStringLiteral("4000 image tokens")) ||
                 page.vramText().contains(QStringLiteral("image tokens a step")),
             qPrintable(page.vramText()));
  }

  // The `vision` LoRA box: enabled and off by default on a vision-language checkpoint, sized as the engine sizes the
  // group; turning it on puts the group in the run and its LoRA pairs in the estimate; greyed out without a tower.
  void trainPageVisionCheckbox() {
    RunDocument doc;
    deltatune::RunConfig cfg = config(kVision + "/model", goldenRows());
    cfg.lora_target_groups = {"attn", "linear_attn", "mlp"};
    cfg.backend = "cuda";
    cfg.gradient_checkpointing_auto = false;
    doc.setConfig(cfg);
    doc.setModelInfo(deltatune::model_info_load((kVision + "/model").toStdString()));
    TrainPage page(&doc, nullptr);
    auto* box = page.findChild<QCheckBox*>(QStringLiteral("lora_group_vision"));
    QVERIFY(box);
    QVERIFY(box->isVisibleTo(&page));
    QVERIFY(box->isEnabled());
    QVERIFY(!box->isChecked());
    const int64_t visionParams =
        deltatune::lora_params_per_group(*doc.modelInfo(), static_cast<int>(cfg.lora_r)).at("vision");
    QVERIFY(visionParams > 0);
    QVERIFY2(page.groupInfoText(QStringLiteral("vision")).contains(QStringLiteral("params")),
             qPrintable(page.groupInfoText(QStringLiteral("vision"))));
    const deltatune::VramEstimate off = page.vramEstimate();
    box->setChecked(true);
    const auto& groups = doc.config().lora_target_groups;
    QVERIFY(std::find(groups.begin(), groups.end(), "vision") != groups.end());
    const deltatune::VramEstimate on = page.vramEstimate();
    QCOMPARE(on.lora_and_optimizer - off.lora_and_optimizer, 16 * visionParams);

    doc.setModelInfo(deltatune::model_info_load((guitest::demoDir() + "/model").toStdString()));
    QVERIFY(box->isVisibleTo(&page));
    QVERIFY(!box->isEnabled());
    QCOMPARE(page.groupInfoText(QStringLiteral("vision")), QStringLiteral("no vision tower"));
  }
};

QTEST_MAIN(VisionPagesTest)
#include "vision_pages_test.moc"
