// Playground page: chat with a model and its adapter side by side. Pick a run and one of its checkpoints
// (or a model folder and an adapter folder), type a message, and see the base model's and the adapter's
// answers stream into two columns; each column keeps its own conversation. Sampling settings sit above.
// Loading and generating run on the GenerationController's thread; errors show in a line and the page
// stays usable.
#pragma once
#include <QList>
#include <QTimer>
#include <QWidget>
#include <vector>

#include "deltatune/generate.h"
#include "store_handle.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QPlainTextEdit;
class QPushButton;
class QRadioButton;
class QSpinBox;
class QTextBrowser;

namespace studio {

class AppSettings;
class GenerationController;
struct GeneratorInfo;

class PlaygroundPage : public QWidget {
  Q_OBJECT
 public:
  explicit PlaygroundPage(AppSettings* settings, QWidget* parent = nullptr);
  ~PlaygroundPage() override;

  GenerationController* generator() const { return gen_; }
  // The conversation as shown (plain text) in the base and adapter columns.
  QString baseText() const;
  QString adapterText() const;
  QString errorText() const;
  QString statusText() const;
  bool isGenerating() const;
  int turnCount() const { return static_cast<int>(turns_.size()); }
  // The sampling settings as the widgets say.
  deltatune::SamplingParams sampling() const;

 public slots:
  void refreshRuns();  // the run list from the experiment database
  // Source: a run of the database and a checkpoint folder of it ("" = its newest, as the engine picks).
  bool selectRun(const QString& runId, const QString& checkpoint = {});
  // Source: folders (adapter "" = base model only).
  void setFolders(const QString& modelDir, const QString& adapterDir);
  void setBackend(const QString& backend);  // auto | cpu | cuda
  void load();
  bool send(const QString& text);
  void cancel();
  void newConversation();

 private:
  struct Turn {
    QString user;
    QString answer[2];  // base, adapter
    QString note[2];    // why it ended when not by itself ("length", "cancelled")
  };
  void buildUi();
  void updateCheckpoints();
  void updateEnabled();
  void render();
  void showError(const QString& message);
  void onLoaded(const GeneratorInfo& info);
  void onFailed(const QString& message);
  void startGeneration();
  deltatune::GeneratorOptions chosenSource(QString* why) const;
  std::vector<deltatune::ChatMessage> history(int side) const;

  AppSettings* settings_;
  StoreHandle store_;
  GenerationController* gen_;

  QRadioButton* fromRun_;
  QRadioButton* fromFolders_;
  QComboBox* run_;
  QComboBox* checkpoint_;
  QLineEdit* modelDir_;
  QLineEdit* adapterDir_;
  QComboBox* backend_;
  QPushButton* loadButton_;
  QLabel* status_;

  QDoubleSpinBox* temperature_;
  QSpinBox* topK_;
  QDoubleSpinBox* topP_;
  QDoubleSpinBox* repetition_;
  QSpinBox* maxTokens_;
  QSpinBox* seed_;
  QComboBox* thinking_;
  QLineEdit* system_;

  QLabel* columnTitle_[2];
  QTextBrowser* column_[2];
  QPlainTextEdit* input_;
  QPushButton* send_;
  QPushButton* cancel_;
  QPushButton* clear_;
  QLabel* error_;

  QList<Turn> turns_;
  std::vector<int> requestSide_;  // request index -> column
  bool sourceChanged_ = true;
  bool sendAfterLoad_ = false;
  bool generating_ = false;
  QTimer renderTimer_;
};

}  // namespace studio
