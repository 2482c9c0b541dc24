//! AdaBoost.R2 (Drucker, 1997) over smartcore's decision-tree regressor: smartcore has no
//! boosting, so the loop is ours — the weighted fit of each tree (`fit_with_weights`), the
//! linear loss, the estimator weights ln(1/β) and the weighted median of the trees'
//! predictions.

use anyhow::{anyhow, Result};
use smartcore::linalg::basic::matrix::DenseMatrix;
use smartcore::tree::decision_tree_regressor::{
    DecisionTreeRegressor, DecisionTreeRegressorParameters,
};

type Tree = DecisionTreeRegressor<f64, f64, DenseMatrix<f64>, Vec<f64>>;

/// A boosted ensemble of regression trees.
pub struct AdaBoost {
    trees: Vec<(Tree, f64)>,
}

impl AdaBoost {
    /// Fit at most `rounds` trees of depth ≤ `depth` on rows `x` with targets `y`.
    pub fn fit(x: &[Vec<f64>], y: &[f64], rounds: usize, depth: u16) -> Result<AdaBoost> {
        let n = x.len();
        if n == 0 || n != y.len() {
            return Err(anyhow!(
                "AdaBoost needs as many targets as rows, and at least one ({n} rows, {} targets)",
                y.len()
            ));
        }
        let matrix =
            DenseMatrix::from_2d_vec(&x.to_vec()).map_err(|e| anyhow!("feature matrix: {e}"))?;
        let targets = y.to_vec();
        let params = DecisionTreeRegressorParameters::default().with_max_depth(depth);
        let mut weights = vec![1.0 / n as f64; n];
        let mut trees = Vec::new();
        for _ in 0..rounds.max(1) {
            let tree = Tree::fit_with_weights(&matrix, &targets, &weights, params.clone())
                .map_err(|e| anyhow!("fitting a tree: {e}"))?;
            let pred = tree
                .predict(&matrix)
                .map_err(|e| anyhow!("tree prediction: {e}"))?;
            let errors: Vec<f64> = pred.iter().zip(y).map(|(p, t)| (p - t).abs()).collect();
            let max = errors.iter().cloned().fold(0.0, f64::max);
            if max <= 0.0 {
                trees.push((tree, 1.0)); // a perfect fit: nothing left to boost
                break;
            }
            let loss: Vec<f64> = errors.iter().map(|e| e / max).collect();
            let error: f64 = loss.iter().zip(&weights).map(|(l, w)| l * w).sum();
            if error >= 0.5 {
                if trees.is_empty() {
                    trees.push((tree, 1.0));
                }
                break;
            }
            let beta = (error / (1.0 - error)).max(1e-12);
            trees.push((tree, (1.0 / beta).ln()));
            for (w, l) in weights.iter_mut().zip(&loss) {
                *w *= beta.powf(1.0 - l);
            }
            let sum: f64 = weights.iter().sum();
            if sum <= 0.0 || !sum.is_finite() {
                break;
            }
            weights.iter_mut().for_each(|w| *w = (*w / sum).max(1e-300));
        }
        Ok(AdaBoost { trees })
    }

    /// The weighted median of the trees' predictions for each row.
    pub fn predict(&self, x: &[Vec<f64>]) -> Result<Vec<f64>> {
        if x.is_empty() {
            return Ok(Vec::new());
        }
        let matrix =
            DenseMatrix::from_2d_vec(&x.to_vec()).map_err(|e| anyhow!("feature matrix: {e}"))?;
        let per_tree: Vec<Vec<f64>> = self
            .trees
            .iter()
            .map(|(t, _)| {
                t.predict(&matrix)
                    .map_err(|e| anyhow!("tree prediction: {e}"))
            })
            .collect::<Result<_>>()?;
        Ok((0..x.len())
            .map(|row| {
                let mut votes: Vec<(f64, f64)> = per_tree
                    .iter()
                    .zip(&self.trees)
                    .map(|(p, (_, w))| (p[row], *w))
                    .collect();
                weighted_median(&mut votes)
            })
            .collect())
    }
}

/// The smallest value whose cumulative weight reaches half the total.
fn weighted_median(votes: &mut [(f64, f64)]) -> f64 {
    votes.sort_by(|a, b| a.0.total_cmp(&b.0));
    let total: f64 = votes.iter().map(|v| v.1).sum();
    let mut acc = 0.0;
    for (value, weight) in votes.iter() {
        acc += weight;
        if acc >= total / 2.0 {
            return *value;
        }
    }
    votes.last().map(|v| v.0).unwrap_or(0.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weighted_median_takes_the_heavy_side() {
        assert_eq!(
            weighted_median(&mut [(1.0, 1.0), (5.0, 3.0), (9.0, 1.0)]),
            5.0
        );
        assert_eq!(weighted_median(&mut [(1.0, 3.0), (5.0, 1.0)]), 1.0);
    }

    #[test]
    fn learns_a_step_function() {
        let x: Vec<Vec<f64>> = (0..40).map(|i| vec![i as f64]).collect();
        let y: Vec<f64> = (0..40).map(|i| if i < 20 { 10.0 } else { 100.0 }).collect();
        let model = AdaBoost::fit(&x, &y, 10, 3).unwrap();
        let p = model.predict(&[vec![3.0], vec![35.0]]).unwrap();
        assert!(
            (p[0] - 10.0).abs() < 1.0 && (p[1] - 100.0).abs() < 1.0,
            "{p:?}"
        );
    }
}
