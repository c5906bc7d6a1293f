// Where the bundled demo (tiny model, dataset, demo_run.yaml) is: the source tree for a build run in
// place, else the installed share/deltatune/demo.
#pragma once
#include <QString>

namespace studio {

QString demoDir();      // "" when not found
QString demoRunFile();  // demoDir()/demo_run.yaml or ""

}  // namespace studio
