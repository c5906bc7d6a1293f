// Runs a blocking engine call (model info, data preview, export) on a short-lived thread and delivers
// the result or the error message on the UI thread. The result is posted to qApp and dropped there if
// `context` was destroyed meanwhile, so no pointer to a dead widget is ever used.
#pragma once
#include <QCoreApplication>
#include <QMetaObject>
#include <QPointer>
#include <QString>
#include <QThread>
#include <exception>
#include <functional>
#include <utility>

namespace studio {

template <typename T>
void runInBackground(QObject* context, std::function<T()> work, std::function<void(T)> done,
                     std::function<void(QString)> failed) {
  QPointer<QObject> guard(context);
  QThread* thread =
      QThread::create([guard, work = std::move(work), done = std::move(done), failed = std::move(failed)]() {
        try {
          T result = work();
          QMetaObject::invokeMethod(
              qApp,
              [guard, done, result = std::move(result)]() {
                if (guard) done(result);
              },
              Qt::QueuedConnection);
        } catch (const std::exception& e) {
          QString msg = QString::fromUtf8(e.what());
          QMetaObject::invokeMethod(
              qApp,
              [guard, failed, msg]() {
                if (guard) failed(msg);
              },
              Qt::QueuedConnection);
        }
      });
  QObject::connect(thread, &QThread::finished, thread, &QObject::deleteLater);
  thread->start();
}

}  // namespace studio
