// The English text the built-in default model learns from (default_model.hpp): its tokenizer's
// merges and its next-token statistics. A plain story in short sentences with a small, repeated
// vocabulary, so that a few hundred merges make whole words and most word pairs occur more than
// once. Written for this project; ASCII only.
#pragma once

#include <string_view>

namespace accel::cli {

/// The story the default model's tokenizer and weights are derived from.
inline constexpr std::string_view default_model_text = R"story(The town by the sea had one long street, a small harbour and a white lighthouse on the hill. Every morning the fishing boats went out before the sun was up, and every evening they came back with the light behind them. The people of the town knew the sea well. They knew when the wind would turn, when the fog would come in from the water, and when it was time to stay at home.

The old lighthouse keeper lived at the top of the hill. He was a quiet man with a grey beard and a warm coat. Every night he climbed the stairs to the lamp, and every night the light turned over the water. The boats could see it from far away, and they knew the way home. When the weather was bad, he did not sleep at all. He sat by the window with a cup of tea and watched the dark water until the morning came.

In the middle of the town there was a bakery. The baker was a young woman who got up long before the sun. She made bread, small cakes and a large round loaf that the people of the town liked very much. The smell of fresh bread came down the street in the early morning, and the children stopped at the window on their way to school. In the winter she gave the first warm loaf to the lighthouse keeper, because he had been awake all night.

The children of the town went to a small school near the harbour. Their teacher was a kind man who liked to read to them at the end of the day. He read stories about ships and islands, about a boy who found a map in an old book, and about a girl who built a boat with her father. The children listened and looked out of the window at the sea, and some of them wanted to be sailors when they grew up.

In the spring the days were long and the water was calm. The boats went far out to sea, and the fishermen sang as they pulled in their nets. The gardens on the hill were full of green leaves and small yellow flowers. The baker made a sweet bread with honey, and the lighthouse keeper painted the door of the lighthouse a bright blue.

In the summer the town was busy. People came from the city to walk on the beach and to swim in the cold water. They sat in the sun, ate fresh fish by the harbour and bought bread at the bakery. The children played on the sand all day and came home with wet feet and red faces. In the evening the whole town sat outside, and the light of the lighthouse turned over the water as it did every night.

In the autumn the wind came back. The leaves on the hill turned red and brown, and the sea was grey and rough. The boats stayed in the harbour on the worst days, and the fishermen mended their nets in the old stone house by the water. The baker made bread with apples from the gardens, and the teacher read the children a long story about a storm at sea.

In the winter the nights were long and dark. Snow fell on the hill and on the roofs of the houses. The lighthouse keeper climbed the stairs early in the afternoon, and the light turned over the water for many hours. The people of the town stayed at home by the fire. They told old stories about the sea, about ships that never came back and about sailors who found their way home in the dark because they saw the light on the hill.

One night in the winter a great storm came in from the sea. The wind was so strong that the windows of the houses shook, and the waves were higher than the harbour wall. A small boat was still out on the water. The fisherman in the boat could not see the harbour, and he could not see the other boats. He could only see the light on the hill, turning slowly over the dark water.

The lighthouse keeper did not sleep that night. He stood by the lamp and kept the light turning. When the lamp began to fail, he went down the stairs, found an old lamp in the store room and carried it up to the top. His hands were cold and the wind was loud, but the light did not go out. Far out on the water the fisherman saw it and turned his boat toward the hill.

In the morning the storm was over. The sky was clear and the sea was calm again. The small boat came into the harbour, and the whole town was there to meet it. The fisherman was wet and tired, but he was safe. He walked up the hill to the lighthouse and thanked the old keeper. The baker brought warm bread for both of them, and the children made a drawing of the lighthouse for the school.

After that night the people of the town looked at the lighthouse in a new way. They had always seen the light, but now they knew how much work it was to keep it turning. In the spring they came up the hill together and painted the whole lighthouse white again. The teacher brought the children, and the baker brought bread and honey for everyone.

The lighthouse keeper was old, and he knew that one day someone else would have to keep the light. He asked the children if any of them wanted to learn. A girl from the school said that she did. Every evening after school she walked up the hill, and the old man showed her how to clean the lamp, how to read the weather and how to write in the book where every night was written down.

The girl learned quickly. She liked the quiet of the lighthouse and the long view over the water. She learned the names of the winds and the names of the boats. She learned that the sea was never the same two days in a row, and that a good keeper always watched the sky. In the winter she stayed late with the old man and listened to his stories about the storms he had seen.

Years went by. The baker grew older, and her son began to make the bread. The teacher grew older, and a new teacher came from the city. The girl grew up and became the keeper of the light. The old man still lived on the hill, in a small house next to the lighthouse, and every evening he sat by his window and watched the light turn over the water.

The town by the sea did not change very much. The boats still went out before the sun was up and came back in the evening. The smell of fresh bread still came down the street in the morning. The children still went to the small school near the harbour and looked out of the window at the sea. And every night the light on the hill turned over the dark water, and the boats knew the way home.

A good day in the town began early. The first boats left the harbour in the dark, and the baker opened the door of the bakery to let the cool air in. The streets were quiet, and the only sound was the sea. Then the sun came up over the water, the gulls began to call, and the town woke up. The shops opened, the children ran to school, and the old men sat on the bench by the harbour to talk about the weather.

The harbour was the heart of the town. The boats were painted in bright colours, red and blue and green, and each one had a name. There was a boat called the Morning Star, a boat called the Little Bird and a very old boat called the Grey Lady. The fishermen knew every boat and every name, and they knew which boat was out and which was in the harbour.

The market was open on the first day of every week. The fishermen sold their fish, the farmers from the hills sold eggs, milk and apples, and the baker sold her bread. People came from the small villages along the coast to buy and to talk. The market was loud and busy until the middle of the day, and then the town was quiet again.

The people of the town liked to walk along the beach in the evening. The sand was soft and the water was cold. They walked to the rocks at the end of the beach and back again, and they watched the sun go down over the sea. When the sun was gone, the first light came from the lighthouse on the hill, and they knew it was time to go home.

The keeper of the light wrote in the book every night. She wrote the time the lamp was lit, the weather, the wind and the boats that came in. The book was very old, and the first pages had been written by keepers who had lived long ago. She liked to read the old pages. They told of storms and calm nights, of ships that passed in the dark, and of the quiet work of keeping the light.

On the longest night of the year the whole town came up the hill. They brought bread, cakes and warm drinks, and they stood together at the door of the lighthouse. The keeper climbed the stairs and lit the lamp, and the light turned over the dark water. The people of the town looked out at the sea and thought of the boats, of the sailors and of the long nights, and then they walked home together in the cold.

This is the story of a small town by the sea, of a white lighthouse on a hill and of the people who kept the light. It is a simple story, and nothing in it is very new. But the people of the town told it to their children, and their children told it to their own children, and the light on the hill kept turning over the water for many, many years.
)story";

/// The prompt `accel run` uses on the default model when none is given: a phrase of the story.
inline constexpr std::string_view default_model_prompt = "In the winter";

}  // namespace accel::cli
