// The Playground on the demo model (CPU backend): a run's checkpoint and the base model answer side by side,
// streamed, over two turns; cancel; and bad input (a prompt longer than the context, an adapter of another
// base model, a run without a checkpoint) shows a message while the page stays usable.
#include <QSignalSpy>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QTest>

#include "app_settings.h"
#include "deltatune/experiment_store.h"
#include "deltatune/trainer.h"
#include "generation_controller.h"
#include "gui_test_util.h"
#include "main_window.h"
#include "pages/playground_page.h"

using namespace studio;

class PlaygroundTest : public QObject {
  Q_OBJECT
 private:
  QTemporaryDir tmp_;
  std::unique_ptr<AppSettings> settings_;
  std::unique_ptr<MainWindow> window_;
  QString runId_;

  PlaygroundPage* page() { return window_->playgroundPage(); }
  std::string dbPath() const { return (tmp_.path() + "/experiments.db").toStdString(); }
  bool waitIdle(int ms = 120000) {
    return guitest::waitFor([&] { return !page()->isGenerating() && !page()->generator()->isBusy(); }, ms);
  }

 private slots:
  void initTestCase() {
    guitest::isolate(tmp_);
    // A short demo run with checkpoints to chat with.
    deltatune::RunConfig cfg = guitest::demoConfig(tmp_, 6);
    cfg.save_steps = 3;
    cfg.eval_steps = 0;
    deltatune::RunObserver quiet;
    deltatune::RunControl control;
    deltatune::TrainOptions opts;
    opts.db_path = dbPath();
    runId_ = QString::fromStdString(deltatune::train_run(cfg, quiet, control, opts));
    settings_ = std::make_unique<AppSettings>(tmp_.path() + "/settings.ini");
    window_ = std::make_unique<MainWindow>(settings_.get());
    window_->resize(1400, 900);
    window_->show();
    window_->showPage(MainWindow::PlaygroundPageIndex);
    page()->setBackend("cpu");
  }

  void baseAndAdapterAnswerSideBySide() {
    QVERIFY(page()->selectRun(runId_));  // its newest checkpoint
    QSignalSpy deltas(page()->generator(), &GenerationController::delta);
    QVERIFY(page()->send("What is 2 plus 3?"));
    QVERIFY(page()->generator()->isBusy());  // loading on the worker thread; the event loop runs meanwhile
    QVERIFY2(waitIdle(), qPrintable(page()->errorText()));
    QVERIFY2(page()->errorText().isEmpty(), qPrintable(page()->errorText()));
    QVERIFY(page()->statusText().contains("context 4096"));
    QVERIFY(!page()->generator()->info().adapterDir.isEmpty());
    QCOMPARE(page()->turnCount(), 1);
    // Streamed: several pieces, for both requests (0 = base, 1 = adapter).
    QSet<int> requests;
    for (const auto& args : deltas) requests.insert(args.at(0).toInt());
    QVERIFY2(deltas.count() > 2, qPrintable(QString::number(deltas.count())));
    QCOMPARE(requests, (QSet<int>{0, 1}));
    QVERIFY(page()->baseText().contains("What is 2 plus 3?"));
    QVERIFY(page()->adapterText().contains("What is 2 plus 3?"));
    const QString base1 = page()->baseText(), adapted1 = page()->adapterText();
    QVERIFY(base1.size() > QString("You\nWhat is 2 plus 3?\nBase\n").size());
    QVERIFY(adapted1.size() > QString("You\nWhat is 2 plus 3?\nAdapter\n").size());

    // A second turn carries each column's own conversation.
    QVERIFY(page()->send("Name the capital city of Italy."));
    QVERIFY(waitIdle());
    QCOMPARE(page()->turnCount(), 2);
    QVERIFY(page()->baseText().startsWith(base1.left(base1.size() - 1)));
    QVERIFY(page()->adapterText().contains("Name the capital city of Italy."));

    // Greedy is the default: the same conversation again gives the same answers.
    page()->newConversation();
    QCOMPARE(page()->turnCount(), 0);
    QVERIFY(page()->send("What is 2 plus 3?"));
    QVERIFY(waitIdle());
    QCOMPARE(page()->baseText(), base1);
    QCOMPARE(page()->adapterText(), adapted1);
  }

  void cancelEndsTheAnswer() {
    page()->newConversation();
    page()->findChild<QSpinBox*>("max_new_tokens")->setValue(3000);
    QSignalSpy deltas(page()->generator(), &GenerationController::delta);
    QVERIFY(page()->send("Tell me a long story."));
    QVERIFY(guitest::waitFor([&] { return deltas.count() >= 2 || !page()->isGenerating(); }, 60000));
    const bool wasGenerating = page()->isGenerating();
    page()->cancel();
    QVERIFY(guitest::waitFor([&] { return !page()->isGenerating(); }, 30000));
    if (wasGenerating) QVERIFY2(page()->baseText().contains("cancelled"), qPrintable(page()->baseText()));
    page()->findChild<QSpinBox*>("max_new_tokens")->setValue(64);
  }

  void promptLongerThanTheContext() {
    page()->newConversation();
    QString longText;
    for (int i = 0; i < 3000; ++i) longText += QStringLiteral("plus seven ");
    QVERIFY(page()->send(longText));
    QVERIFY(waitIdle());
    QVERIFY2(page()->errorText().contains("context"), qPrintable(page()->errorText()));
    QCOMPARE(page()->turnCount(), 0);  // the message went back to the input box
    // Still usable.
    QVERIFY(page()->send("What is 1 plus 1?"));
    QVERIFY(waitIdle());
    QVERIFY(page()->errorText().isEmpty());
    QCOMPARE(page()->turnCount(), 1);
  }

  void adapterOfAnotherBase() {
    page()->newConversation();
    page()->setFolders(guitest::demoDir() + "/model", QStringLiteral(DT_SOURCE_DIR "/tests/goldens/lora/moe_tied/adapter"));
    QVERIFY(page()->send("What is 4 plus 4?"));
    QVERIFY(waitIdle());
    QVERIFY2(page()->errorText().contains("does not fit"), qPrintable(page()->errorText()));
    // The model stays loaded without an adapter: the base answers.
    QVERIFY(page()->generator()->isLoaded());
    QVERIFY(page()->generator()->info().adapterDir.isEmpty());
    QVERIFY(page()->send("What is 4 plus 4?"));
    QVERIFY(waitIdle());
    QCOMPARE(page()->turnCount(), 1);
    QVERIFY(page()->adapterText().contains("No adapter loaded"));
  }

  void runWithoutACheckpoint() {
    page()->newConversation();
    deltatune::RunRecord r;
    r.name = "no-checkpoint";
    r.status = "failed";
    r.model = (guitest::demoDir() + "/model").toStdString();
    r.output_dir = (tmp_.path() + "/runs/empty").toStdString();
    QDir().mkpath(QString::fromStdString(r.output_dir));
    const QString id = QString::fromStdString(deltatune::ExperimentStore(dbPath()).create_run(r));
    QVERIFY(page()->selectRun(id));
    QVERIFY(page()->send("What is 5 plus 5?"));
    QVERIFY(waitIdle());
    QVERIFY2(page()->errorText().contains("no checkpoint"), qPrintable(page()->errorText()));
    // The page stays usable: back to the trained run.
    QVERIFY(page()->selectRun(runId_));
    QVERIFY(page()->send("What is 5 plus 5?"));
    QVERIFY(waitIdle());
    QVERIFY(page()->errorText().isEmpty());
    QCOMPARE(page()->turnCount(), 1);
    const QString shots = qEnvironmentVariable("DT_GUI_SHOT_DIR");
    if (!shots.isEmpty()) window_->grab().save(shots + "/playground_test.png");
  }
};

QTEST_MAIN(PlaygroundTest)
#include "playground_test.moc"
