// The expert-parallel exchange plan (model/expert_parallel_plan.h), simulated for every rank: the rows each rank
// sends in its dispatch order (sorted by expert) arrive at their experts' rank, and the expert-major regrouping
// gives every local expert its rows from all sources, in source order, within local_offsets.
#include <gtest/gtest.h>

#include <random>
#include <tuple>

#include "core/error.h"
#include "model/expert_parallel_plan.h"

namespace deltatune {
namespace {

using Row = std::tuple<int64_t, int, int64_t>;  // expert, source rank, index among that source's rows of the expert

TEST(ExpertParallelPlan, RowsReachTheirExpertsInExpertMajorOrder) {
  std::mt19937 rng(3);
  for (int world : {1, 2, 4}) {
    for (int64_t E : {4, 8, 16}) {
      if (E % world) continue;
      std::vector<std::vector<int64_t>> counts(static_cast<size_t>(world), std::vector<int64_t>(static_cast<size_t>(E)));
      for (auto& c : counts)
        for (auto& n : c) n = static_cast<int64_t>(rng() % 5);  // zeros included
      std::vector<ExpertExchangePlan> plans;
      for (int r = 0; r < world; ++r) plans.push_back(plan_expert_exchange(counts, r));
      // Each rank's rows in dispatch order, cut by send_rows.
      std::vector<std::vector<std::vector<Row>>> sent(static_cast<size_t>(world));  // [src][dst]
      for (int s = 0; s < world; ++s) {
        std::vector<Row> rows;
        for (int64_t e = 0; e < E; ++e)
          for (int64_t i = 0; i < counts[s][e]; ++i) rows.emplace_back(e, s, i);
        size_t at = 0;
        for (int d = 0; d < world; ++d) {
          const size_t n = static_cast<size_t>(plans[s].send_rows[d]);
          sent[s].emplace_back(rows.begin() + at, rows.begin() + at + n);
          at += n;
        }
        ASSERT_EQ(at, rows.size());
      }
      for (int d = 0; d < world; ++d) {
        const ExpertExchangePlan& p = plans[d];
        std::vector<Row> received;
        for (int s = 0; s < world; ++s) {
          ASSERT_EQ(p.recv_rows[s], static_cast<int64_t>(sent[s][d].size())) << "world " << world << " E " << E;
          received.insert(received.end(), sent[s][d].begin(), sent[s][d].end());
        }
        ASSERT_EQ(p.expert_major.size(), received.size());
        ASSERT_EQ(p.local_offsets.size(), static_cast<size_t>(p.experts_per_rank + 1));
        std::vector<Row> grouped;
        for (int32_t j : p.expert_major) grouped.push_back(received.at(static_cast<size_t>(j)));
        for (size_t j = 1; j < grouped.size(); ++j) EXPECT_LT(grouped[j - 1], grouped[j]);  // expert, source, index
        for (int64_t k = 0; k < p.experts_per_rank; ++k)
          for (int32_t j = p.local_offsets[k]; j < p.local_offsets[k + 1]; ++j)
            EXPECT_EQ(std::get<0>(grouped[static_cast<size_t>(j)]), p.first_expert + k);
      }
    }
  }
}

TEST(ExpertParallelPlan, ExpertsThatDoNotDivideAreRefused) {
  const std::vector<std::vector<int64_t>> counts(3, std::vector<int64_t>(8, 1));
  try {
    plan_expert_exchange(counts, 0);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("8 experts do not divide over 3 GPUs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace deltatune
