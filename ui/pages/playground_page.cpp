#include "pages/playground_page.h"

#include <QButtonGroup>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QFileInfo>
#include <QFormLayout>
#include <QGridLayout>
#include <QGroupBox>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QRadioButton>
#include <QScrollBar>
#include <QSpinBox>
#include <QSplitter>
#include <QStyle>
#include <QTextBrowser>
#include <QVBoxLayout>
#include <algorithm>
#include <exception>

#include "app_settings.h"
#include "generation_controller.h"

namespace studio {

namespace {
enum Side { Base = 0, Adapted = 1 };

QString htmlText(const QString& s) {
  return s.toHtmlEscaped().replace('\n', QStringLiteral("<br>"));
}

QWidget* folderRow(QLineEdit* edit, QWidget* parent, const QString& title) {
  auto* w = new QWidget;
  auto* l = new QHBoxLayout(w);
  l->setContentsMargins(0, 0, 0, 0);
  l->addWidget(edit, 1);
  auto* browse = new QPushButton(QObject::tr("…"));
  browse->setFixedWidth(32);
  l->addWidget(browse);
  QObject::connect(browse, &QPushButton::clicked, parent, [edit, parent, title] {
    const QString d = QFileDialog::getExistingDirectory(parent, title, edit->text());
    if (!d.isEmpty()) edit->setText(d);
  });
  return w;
}
}  // namespace

PlaygroundPage::PlaygroundPage(AppSettings* settings, QWidget* parent) : QWidget(parent), settings_(settings) {
  gen_ = new GenerationController(this);
  buildUi();
  renderTimer_.setSingleShot(true);
  renderTimer_.setInterval(40);
  connect(&renderTimer_, &QTimer::timeout, this, &PlaygroundPage::render);
  connect(gen_, &GenerationController::loaded, this, &PlaygroundPage::onLoaded);
  connect(gen_, &GenerationController::failed, this, &PlaygroundPage::onFailed);
  connect(gen_, &GenerationController::busyChanged, this, &PlaygroundPage::updateEnabled);
  connect(gen_, &GenerationController::delta, this, [this](int request, const QString& text) {
    if (turns_.isEmpty() || request < 0 || request >= static_cast<int>(requestSide_.size())) return;
    turns_.last().answer[requestSide_[static_cast<size_t>(request)]] += text;
    if (!renderTimer_.isActive()) renderTimer_.start();
  });
  connect(gen_, &GenerationController::requestFinished, this,
          [this](int request, const QString& reason, int newTokens, int) {
            if (turns_.isEmpty() || request < 0 || request >= static_cast<int>(requestSide_.size())) return;
            const int side = requestSide_[static_cast<size_t>(request)];
            if (reason == QLatin1String("length"))
              turns_.last().note[side] = tr("stopped at %1 new tokens").arg(newTokens);
            else if (reason == QLatin1String("cancelled"))
              turns_.last().note[side] = tr("cancelled");
          });
  connect(gen_, &GenerationController::finished, this, [this] {
    generating_ = false;
    render();
    updateEnabled();
  });
  refreshRuns();
  render();
  updateEnabled();
}

PlaygroundPage::~PlaygroundPage() = default;

void PlaygroundPage::buildUi() {
  auto* outer = new QVBoxLayout(this);
  auto* top = new QHBoxLayout;

  auto* source = new QGroupBox(tr("Model and adapter"));
  auto* sourceGrid = new QGridLayout(source);
  fromRun_ = new QRadioButton(tr("Run"));
  fromFolders_ = new QRadioButton(tr("Folders"));
  fromRun_->setChecked(true);
  auto* group = new QButtonGroup(this);
  group->addButton(fromRun_);
  group->addButton(fromFolders_);
  run_ = new QComboBox;
  run_->setObjectName(QStringLiteral("playground_run"));
  run_->setMinimumContentsLength(28);
  run_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  checkpoint_ = new QComboBox;
  checkpoint_->setObjectName(QStringLiteral("playground_checkpoint"));
  checkpoint_->setMinimumContentsLength(22);
  checkpoint_->setSizeAdjustPolicy(QComboBox::AdjustToMinimumContentsLengthWithIcon);
  auto* refresh = new QPushButton(style()->standardIcon(QStyle::SP_BrowserReload), QString());
  refresh->setToolTip(tr("Read the runs again"));
  auto* runRow = new QHBoxLayout;
  runRow->addWidget(run_, 2);
  runRow->addWidget(new QLabel(tr("checkpoint")));
  runRow->addWidget(checkpoint_, 1);
  runRow->addWidget(refresh);
  sourceGrid->addWidget(fromRun_, 0, 0);
  sourceGrid->addLayout(runRow, 0, 1);
  modelDir_ = new QLineEdit;
  modelDir_->setPlaceholderText(tr("model folder (config.json, safetensors, tokenizer)"));
  adapterDir_ = new QLineEdit;
  adapterDir_->setPlaceholderText(tr("adapter folder (optional)"));
  auto* folders = new QHBoxLayout;
  folders->addWidget(folderRow(modelDir_, this, tr("Model folder")), 1);
  folders->addWidget(folderRow(adapterDir_, this, tr("Adapter folder")), 1);
  sourceGrid->addWidget(fromFolders_, 1, 0);
  sourceGrid->addLayout(folders, 1, 1);
  auto* loadRow = new QHBoxLayout;
  backend_ = new QComboBox;
  backend_->setObjectName(QStringLiteral("playground_backend"));
  backend_->addItems({"auto", "cpu", "cuda"});
  loadButton_ = new QPushButton(tr("Load"));
  status_ = new QLabel(tr("Nothing loaded."));
  status_->setStyleSheet(QStringLiteral("color: #555;"));
  status_->setWordWrap(true);
  loadRow->addWidget(new QLabel(tr("Backend")));
  loadRow->addWidget(backend_);
  loadRow->addWidget(loadButton_);
  loadRow->addWidget(status_, 1);
  sourceGrid->addLayout(loadRow, 2, 0, 1, 2);
  sourceGrid->setColumnStretch(1, 1);
  top->addWidget(source, 3);

  auto* samplingBox = new QGroupBox(tr("Sampling"));
  auto* form = new QGridLayout(samplingBox);
  temperature_ = new QDoubleSpinBox;
  temperature_->setObjectName(QStringLiteral("temperature"));
  temperature_->setRange(0, 2);
  temperature_->setSingleStep(0.05);
  temperature_->setSpecialValueText(tr("0 (greedy)"));
  topK_ = new QSpinBox;
  topK_->setObjectName(QStringLiteral("top_k"));
  topK_->setRange(0, 100000);
  topK_->setSpecialValueText(tr("off"));
  topP_ = new QDoubleSpinBox;
  topP_->setObjectName(QStringLiteral("top_p"));
  topP_->setRange(0.01, 1);
  topP_->setSingleStep(0.05);
  topP_->setValue(1);
  repetition_ = new QDoubleSpinBox;
  repetition_->setObjectName(QStringLiteral("repetition_penalty"));
  repetition_->setRange(0.5, 3);
  repetition_->setSingleStep(0.05);
  repetition_->setValue(1);
  maxTokens_ = new QSpinBox;
  maxTokens_->setObjectName(QStringLiteral("max_new_tokens"));
  maxTokens_->setRange(1, 32768);
  maxTokens_->setValue(256);
  seed_ = new QSpinBox;
  seed_->setObjectName(QStringLiteral("seed"));
  seed_->setRange(0, 2147483647);
  thinking_ = new QComboBox;
  thinking_->setObjectName(QStringLiteral("enable_thinking"));
  thinking_->addItem(tr("template default"));
  thinking_->addItem(tr("on"), true);
  thinking_->addItem(tr("off"), false);
  system_ = new QLineEdit;
  system_->setPlaceholderText(tr("system prompt (optional)"));
  auto add = [form](int row, int col, const QString& label, QWidget* w) {
    form->addWidget(new QLabel(label), row, col * 2);
    form->addWidget(w, row, col * 2 + 1);
  };
  add(0, 0, tr("Temperature"), temperature_);
  add(0, 1, tr("Top-k"), topK_);
  add(0, 2, tr("Top-p"), topP_);
  add(1, 0, tr("Repetition penalty"), repetition_);
  add(1, 1, tr("Max new tokens"), maxTokens_);
  add(1, 2, tr("Seed"), seed_);
  add(2, 0, tr("Thinking"), thinking_);
  form->addWidget(new QLabel(tr("System")), 2, 2);
  form->addWidget(system_, 2, 3, 1, 3);
  top->addWidget(samplingBox, 2);
  outer->addLayout(top);

  auto* split = new QSplitter(Qt::Horizontal);
  for (int side : {Base, Adapted}) {
    auto* w = new QWidget;
    auto* l = new QVBoxLayout(w);
    l->setContentsMargins(0, 0, 0, 0);
    columnTitle_[side] = new QLabel;
    columnTitle_[side]->setStyleSheet(QStringLiteral("font-weight: bold;"));
    column_[side] = new QTextBrowser;
    column_[side]->setObjectName(side == Base ? QStringLiteral("base_answers") : QStringLiteral("adapter_answers"));
    l->addWidget(columnTitle_[side]);
    l->addWidget(column_[side], 1);
    split->addWidget(w);
  }
  outer->addWidget(split, 1);

  error_ = new QLabel;
  error_->setWordWrap(true);
  error_->setStyleSheet(QStringLiteral("color: #b00020;"));
  error_->hide();
  outer->addWidget(error_);

  auto* inputRow = new QHBoxLayout;
  input_ = new QPlainTextEdit;
  input_->setPlaceholderText(tr("Type a message; Ctrl+Enter sends it to both models."));
  input_->setMaximumHeight(80);
  inputRow->addWidget(input_, 1);
  auto* buttons = new QVBoxLayout;
  send_ = new QPushButton(style()->standardIcon(QStyle::SP_ArrowRight), tr("Send"));
  send_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Return));
  cancel_ = new QPushButton(style()->standardIcon(QStyle::SP_MediaStop), tr("Cancel"));
  clear_ = new QPushButton(tr("New conversation"));
  buttons->addWidget(send_);
  buttons->addWidget(cancel_);
  buttons->addWidget(clear_);
  inputRow->addLayout(buttons);
  outer->addLayout(inputRow);

  auto sourceEdited = [this] {
    sourceChanged_ = true;
    updateEnabled();
  };
  connect(fromRun_, &QRadioButton::toggled, this, sourceEdited);
  connect(run_, &QComboBox::currentIndexChanged, this, [this, sourceEdited] {
    updateCheckpoints();
    sourceEdited();
  });
  connect(checkpoint_, &QComboBox::currentIndexChanged, this, sourceEdited);
  connect(modelDir_, &QLineEdit::textChanged, this, [this, sourceEdited] {
    fromFolders_->setChecked(true);
    sourceEdited();
  });
  connect(adapterDir_, &QLineEdit::textChanged, this, [this, sourceEdited] {
    fromFolders_->setChecked(true);
    sourceEdited();
  });
  connect(backend_, &QComboBox::currentIndexChanged, this, sourceEdited);
  connect(refresh, &QPushButton::clicked, this, &PlaygroundPage::refreshRuns);
  connect(loadButton_, &QPushButton::clicked, this, &PlaygroundPage::load);
  connect(send_, &QPushButton::clicked, this, [this] { send(input_->toPlainText()); });
  connect(cancel_, &QPushButton::clicked, this, &PlaygroundPage::cancel);
  connect(clear_, &QPushButton::clicked, this, &PlaygroundPage::newConversation);
}

QString PlaygroundPage::baseText() const {
  return column_[Base]->toPlainText();
}
QString PlaygroundPage::adapterText() const {
  return column_[Adapted]->toPlainText();
}
QString PlaygroundPage::errorText() const {
  return error_->isVisible() || !error_->text().isEmpty() ? error_->text() : QString();
}
QString PlaygroundPage::statusText() const {
  return status_->text();
}
bool PlaygroundPage::isGenerating() const {
  return generating_;
}

deltatune::SamplingParams PlaygroundPage::sampling() const {
  deltatune::SamplingParams p;
  p.temperature = temperature_->value();
  p.top_k = topK_->value();
  p.top_p = topP_->value();
  p.repetition_penalty = repetition_->value();
  p.max_new_tokens = maxTokens_->value();
  p.seed = static_cast<uint64_t>(seed_->value());
  return p;
}

void PlaygroundPage::refreshRuns() {
  const QString keep = run_->currentData().toString();
  QSignalBlocker block(run_);
  run_->clear();
  try {
    deltatune::ExperimentStore* s = store_.open(settings_->databasePath());
    for (const deltatune::RunRecord& r : s->list_runs()) {
      const QString name = QString::fromStdString(r.name.empty() ? r.id : r.name);
      run_->addItem(tr("%1 (%2, %3 / %4 steps)").arg(name, QString::fromStdString(r.status)).arg(r.steps).arg(r.total_steps),
                    QString::fromStdString(r.id));
    }
  } catch (const std::exception& e) {
    showError(tr("Cannot read the experiment database: %1").arg(QString::fromUtf8(e.what())));
  }
  if (run_->count() == 0) run_->addItem(tr("(no runs yet)"));
  const int i = run_->findData(keep);
  run_->setCurrentIndex(i >= 0 ? i : 0);
  updateCheckpoints();
}

void PlaygroundPage::updateCheckpoints() {
  QSignalBlocker block(checkpoint_);
  const QString keep = checkpoint_->currentData().toString();
  checkpoint_->clear();
  const QString id = run_->currentData().toString();
  if (id.isEmpty()) return;
  checkpoint_->addItem(tr("newest"), QString());
  try {
    std::vector<deltatune::ArtifactRecord> arts = store_.open(settings_->databasePath())->artifacts(id.toStdString());
    std::sort(arts.begin(), arts.end(), [](const auto& a, const auto& b) { return a.step > b.step; });
    for (const auto& a : arts) {
      if (a.kind != "checkpoint" && a.kind != "adapter") continue;
      if (!QFileInfo::exists(QString::fromStdString(a.path) + "/adapter_config.json")) continue;  // pruned
      const QString label = a.kind == "adapter" ? tr("final adapter (step %1)").arg(a.step)
                                                : tr("step %1").arg(a.step);
      checkpoint_->addItem(label, QString::fromStdString(a.path));
    }
  } catch (const std::exception&) {
    // The run list shows the database error already.
  }
  checkpoint_->setCurrentIndex(std::max(0, checkpoint_->findData(keep)));
}

bool PlaygroundPage::selectRun(const QString& runId, const QString& checkpoint) {
  refreshRuns();
  const int i = run_->findData(runId);
  if (i < 0) return false;
  fromRun_->setChecked(true);
  run_->setCurrentIndex(i);
  updateCheckpoints();
  const int c = checkpoint_->findData(checkpoint);
  if (c < 0) return false;
  checkpoint_->setCurrentIndex(c);
  sourceChanged_ = true;
  return true;
}

void PlaygroundPage::setFolders(const QString& modelDir, const QString& adapterDir) {
  modelDir_->setText(modelDir);
  adapterDir_->setText(adapterDir);
  fromFolders_->setChecked(true);
  sourceChanged_ = true;
}

void PlaygroundPage::setBackend(const QString& backend) {
  backend_->setCurrentText(backend);
}

deltatune::GeneratorOptions PlaygroundPage::chosenSource(QString* why) const {
  deltatune::GeneratorOptions o;
  o.backend = backend_->currentText().toStdString();
  o.db_path = settings_->databasePath().toStdString();
  if (fromFolders_->isChecked()) {
    o.model_dir = modelDir_->text().trimmed().toStdString();
    o.adapter = adapterDir_->text().trimmed().toStdString();
    if (o.model_dir.empty()) *why = tr("Choose a model folder.");
    return o;
  }
  const QString id = run_->currentData().toString();
  if (id.isEmpty()) {
    *why = tr("There is no run to chat with yet: train one, or choose folders.");
    return o;
  }
  try {
    const auto r = const_cast<StoreHandle&>(store_).open(settings_->databasePath())->find_run(id.toStdString());
    if (!r) {
      *why = tr("Run %1 is no longer in the database.").arg(id);
      return o;
    }
    o.model_dir = r->model;
  } catch (const std::exception& e) {
    *why = QString::fromUtf8(e.what());
    return o;
  }
  const QString ckpt = checkpoint_->currentData().toString();
  o.adapter = (ckpt.isEmpty() ? id : ckpt).toStdString();  // a run id: the engine picks its newest adapter
  return o;
}

void PlaygroundPage::load() {
  if (gen_->isBusy()) return;
  QString why;
  const deltatune::GeneratorOptions o = chosenSource(&why);
  if (!why.isEmpty()) {
    showError(why);
    sendAfterLoad_ = false;
    return;
  }
  error_->hide();
  error_->clear();
  status_->setText(tr("Loading %1…").arg(QString::fromStdString(o.model_dir)));
  sourceChanged_ = false;
  gen_->load(o);
}

void PlaygroundPage::onLoaded(const GeneratorInfo& info) {
  status_->setText(tr("<b>%1</b> on %2, context %3 tokens")
                       .arg(QDir(info.modelDir).dirName(), info.backend)
                       .arg(info.contextLength) +
                   (info.backendNote.isEmpty() ? QString()
                                               : QStringLiteral("<br><span style='color:#a05a00'>%1</span>")
                                                     .arg(info.backendNote.toHtmlEscaped())));
  status_->setToolTip(info.modelDir + (info.adapterDir.isEmpty() ? QString() : "\n" + info.adapterDir));
  render();
  if (sendAfterLoad_) {
    sendAfterLoad_ = false;
    startGeneration();
  }
  updateEnabled();
}

void PlaygroundPage::onFailed(const QString& message) {
  showError(message);
  if (sendAfterLoad_ || generating_) {
    // The message was not answered: give it back to the input so it can be edited and sent again.
    if (!turns_.isEmpty() && turns_.last().answer[Base].isEmpty() && turns_.last().answer[Adapted].isEmpty()) {
      input_->setPlainText(turns_.last().user);
      turns_.removeLast();
    }
  }
  sendAfterLoad_ = false;
  generating_ = false;
  if (gen_->isLoaded()) onLoaded(gen_->info());
  else status_->setText(tr("Nothing loaded."));
  render();
  updateEnabled();
}

void PlaygroundPage::showError(const QString& message) {
  error_->setText(message);
  error_->show();
}

bool PlaygroundPage::send(const QString& text) {
  const QString t = text.trimmed();
  if (t.isEmpty() || gen_->isBusy() || generating_) return false;
  error_->hide();
  error_->clear();
  Turn turn;
  turn.user = t;
  turns_.append(turn);
  input_->clear();
  render();
  if (!gen_->isLoaded() || sourceChanged_) {
    sendAfterLoad_ = true;
    load();
    if (!sendAfterLoad_) {  // the source is not usable: nothing was asked
      input_->setPlainText(t);
      turns_.removeLast();
      render();
      return false;
    }
    return true;
  }
  startGeneration();
  return true;
}

std::vector<deltatune::ChatMessage> PlaygroundPage::history(int side) const {
  std::vector<deltatune::ChatMessage> m;
  if (!system_->text().trimmed().isEmpty()) m.push_back({"system", system_->text().trimmed().toStdString()});
  for (int i = 0; i < turns_.size(); ++i) {
    m.push_back({"user", turns_[i].user.toStdString()});
    if (i + 1 < turns_.size()) m.push_back({"assistant", turns_[i].answer[side].toStdString()});
  }
  return m;
}

void PlaygroundPage::startGeneration() {
  if (turns_.isEmpty()) return;
  std::vector<deltatune::GenerateRequest> reqs;
  requestSide_.clear();
  const bool adapter = !gen_->info().adapterDir.isEmpty();
  for (int side : {Base, Adapted}) {
    if (side == Adapted && !adapter) continue;
    deltatune::GenerateRequest r;
    r.messages = history(side);
    r.use_adapter = side == Adapted;
    r.sampling = sampling();
    if (thinking_->currentData().isValid()) r.enable_thinking = thinking_->currentData().toBool();
    reqs.push_back(std::move(r));
    requestSide_.push_back(side);
  }
  generating_ = gen_->generate(reqs);
  if (!generating_) showError(tr("The model is busy; try again in a moment."));
  updateEnabled();
}

void PlaygroundPage::cancel() {
  sendAfterLoad_ = false;
  gen_->cancel();
}

void PlaygroundPage::newConversation() {
  if (generating_) return;
  turns_.clear();
  error_->hide();
  error_->clear();
  render();
}

void PlaygroundPage::render() {
  const bool adapter = gen_->isLoaded() && !gen_->info().adapterDir.isEmpty();
  columnTitle_[Base]->setText(tr("Base model"));
  columnTitle_[Adapted]->setText(adapter ? tr("With adapter: %1").arg(QDir(gen_->info().adapterDir).dirName())
                                         : tr("With adapter"));
  for (int side : {Base, Adapted}) {
    QString html;
    if (side == Adapted && gen_->isLoaded() && !adapter) {
      html = tr("<p style='color:#555'>No adapter loaded: only the base model answers. Pick a run with a "
                "checkpoint, or an adapter folder.</p>");
    } else if (turns_.isEmpty()) {
      html = side == Base ? tr("<p style='color:#555'>The base model's answers appear here.</p>")
                          : tr("<p style='color:#555'>The adapter's answers appear here, next to the base "
                               "model's, for the same conversation.</p>");
    }
    for (int i = 0; i < turns_.size(); ++i) {
      const Turn& t = turns_[i];
      html += QStringLiteral("<p style='margin-bottom:2px'><b style='color:#1f77b4'>%1</b><br>%2</p>")
                  .arg(tr("You"), htmlText(t.user));
      const bool pending = generating_ && i == turns_.size() - 1;
      QString answer = htmlText(t.answer[side]);
      if (pending) answer += QStringLiteral("<span style='color:#888'> ▌</span>");
      if (!t.note[side].isEmpty())
        answer += QStringLiteral(" <span style='color:#a05a00'>[%1]</span>").arg(t.note[side].toHtmlEscaped());
      html += QStringLiteral("<p style='margin-top:0'><b style='color:%1'>%2</b><br>%3</p>")
                  .arg(side == Base ? QStringLiteral("#555") : QStringLiteral("#2c7a2c"),
                       side == Base ? tr("Base") : tr("Adapter"), answer);
    }
    column_[side]->setHtml(html);
    column_[side]->verticalScrollBar()->setValue(column_[side]->verticalScrollBar()->maximum());
  }
}

void PlaygroundPage::updateEnabled() {
  const bool busy = gen_->isBusy() || generating_;
  send_->setEnabled(!busy);
  loadButton_->setEnabled(!gen_->isBusy());
  cancel_->setEnabled(busy);
  clear_->setEnabled(!generating_);
  loadButton_->setText(gen_->isLoaded() && !sourceChanged_ ? tr("Reload") : tr("Load"));
}

}  // namespace studio
